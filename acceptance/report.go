package acceptance

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
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
	fmt.Fprintf(w, "  service        %s, version %s, store %s\n", h.ServiceURL, h.ServiceVersion, h.Store)
	fmt.Fprintf(w, "  receiver       %s, dedupe %s, keys kept %s\n", h.ReceiverURL, h.ReceiverMode.Dedupe, retention)
	fmt.Fprintf(w, "  configuration  %s: %s\n", h.ConfigurationHash, strings.Join(dests, ", "))
	fmt.Fprintf(w, "  retries        %s\n", h.RetrySettings)
	fmt.Fprintf(w, "  timestamp      %s\n", h.Timestamp.Format("2006-01-02T15:04:05Z"))
}

// WriteTable prints the result table, the reasons of every failure, and the last line "N passed, M
// failed".
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
	for _, c := range res.Cases {
		if c.Status != Fail {
			continue
		}
		fmt.Fprintf(w, "\nFAIL case %s: %s\n", c.ID, c.Title)
		for _, f := range c.Failures {
			fmt.Fprintf(w, "  %s\n", f)
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
