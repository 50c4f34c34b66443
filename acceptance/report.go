package acceptance

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"unicode/utf8"
)

// WriteHeader prints the header: what ran, against what, on which configuration, when.
func WriteHeader(w io.Writer, h Header) {
	retention := "forever"
	if h.ReceiverMode.KeyRetentionSeconds != nil && *h.ReceiverMode.KeyRetentionSeconds > 0 {
		retention = fmt.Sprintf("%d s", *h.ReceiverMode.KeyRetentionSeconds)
	}
	dests := make([]string, len(h.Destinations))
	for i, d := range h.Destinations {
		dests[i] = fmt.Sprintf("%s (dedupe %s, keys kept %d s)", d.Name, d.Dedupe, d.KeyRetentionSeconds)
	}
	fmt.Fprintf(w, "companion acceptance, run %s\n", h.RunID)
	for _, row := range [][2]string{
		{"service", fmt.Sprintf("%s, version %s, store %s", h.ServiceURL, h.ServiceVersion, h.Store)},
		{"receiver", fmt.Sprintf("%s, dedupe %s, keys kept %s", h.ReceiverURL, h.ReceiverMode.Dedupe, retention)},
		{"configuration", fmt.Sprintf("%s: %s", h.ConfigurationHash, strings.Join(dests, ", "))},
		{"retries", h.RetrySettings},
		{"timestamp", h.Timestamp.Format("2006-01-02T15:04:05Z")},
	} {
		wrap(w, fmt.Sprintf("  %-14s ", row[0]), strings.Repeat(" ", 17), row[1])
	}
}

// ReportWidth is the width the default report wraps its lines at.
const ReportWidth = 100

// WriteTable prints the result as one wide table, a row per case (--wide), then the reasons of every
// failure, and the last line "N passed, M failed". A row is as wide as its longest ledger history,
// often over 400 columns.
func WriteTable(w io.Writer, res *Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tINJECTED FAULT @ BOUNDARY\tCLIENT SAW\tEXPECTED LEDGER\tOBSERVED LEDGER\tEXPECTED EFFECTS\tOBSERVED EFFECTS\tRESULT")
	for _, c := range res.Cases {
		if c.Status == Skip {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t%s (%s)\n", c.ID, c.Fault, Skip, c.SkipReason)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.ID, c.Fault, dash(strings.Join(c.ClientSaw, "; ")),
			dash(c.ExpectedLedger), dash(c.ObservedLedger), dash(c.ExpectedEffects), dash(c.ObservedEffects), c.Status)
	}
	_ = tw.Flush()
	writeSummary(w, res)
}

// WriteReport prints the result a block per case, each line wrapped within ReportWidth columns (the
// default; WriteTable is the one-row-per-case form), then the reasons of every failure, and the last
// line "N passed, M failed". The observed ledger and effects are printed only where they differ from
// the expected ones.
func WriteReport(w io.Writer, res *Result) {
	for _, c := range res.Cases {
		fmt.Fprintf(w, "case %-3s %s  %s\n", c.ID, c.Status, c.Fault)
		if c.Status == Skip {
			writeWrapped(w, "skipped", c.SkipReason)
			continue
		}
		writeWrapped(w, "client saw", dash(strings.Join(c.ClientSaw, "; ")))
		writeWrapped(w, "ledger", dash(c.ExpectedLedger))
		if c.ObservedLedger != c.ExpectedLedger {
			writeWrapped(w, "observed", dash(c.ObservedLedger))
		}
		effects := dash(c.ExpectedEffects)
		if c.ObservedEffects != c.ExpectedEffects {
			effects += ", observed " + dash(c.ObservedEffects)
		}
		writeWrapped(w, "effects", effects)
	}
	writeSummary(w, res)
}

// writeWrapped prints "  label  text", the text wrapped at word boundaries within ReportWidth columns
// and indented under itself.
func writeWrapped(w io.Writer, label, text string) {
	prefix := fmt.Sprintf("  %-11s ", label)
	wrap(w, prefix, strings.Repeat(" ", len(prefix)), text)
}

// wrap prints text after first, wrapped at word boundaries within ReportWidth columns, each further line
// after indent. A word longer than the width stays whole on its own line.
func wrap(w io.Writer, first, indent, text string) {
	line, words := first, 0
	for _, word := range strings.Fields(text) {
		if words > 0 && utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) > ReportWidth {
			fmt.Fprintln(w, line)
			line, words = indent, 0
		}
		if words > 0 {
			line += " "
		}
		line += word
		words++
	}
	fmt.Fprintln(w, line)
}

// writeSummary prints the reasons of every failure, the skipped cases, the duration, and the last line
// "N passed, M failed".
func writeSummary(w io.Writer, res *Result) {
	for _, c := range res.Cases {
		if c.Status != Fail {
			continue
		}
		fmt.Fprintf(w, "\nFAIL case %s: %s\n", c.ID, c.Title)
		for _, f := range c.Failures {
			wrap(w, "  ", "    ", f)
		}
	}
	fmt.Fprintln(w)
	for _, c := range res.Cases {
		if c.Status == Skip {
			fmt.Fprintf(w, "skipped case %s: %s\n", c.ID, c.SkipReason)
		}
	}
	fmt.Fprintf(w, "suite ran in %.1f s\n", res.Duration)
	fmt.Fprintf(w, "%d passed, %d failed\n", res.Passed, res.Failed)
}

// WriteJSON prints the whole result as one JSON document.
func WriteJSON(w io.Writer, res *Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(res)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
