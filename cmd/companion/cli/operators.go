package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/replaysafe/companion/items"
)

func init() {
	commands = append(commands,
		command{"items", "list, show and resolve items (operator API; items list|show|resolve)", (*Main).items},
		command{"stats", "show the post-release measures (operator API)", func(m *Main, ctx context.Context, args []string) error {
			return m.printingData(func() error { return m.stats(ctx, args) })
		}},
	)
}

const clientEnv = `It talks to a running service: COMPANION_URL (default http://127.0.0.1:8080) and COMPANION_TOKEN
(an operator token; not needed when the service runs open on loopback). --json prints the API's JSON.`

// apiClient calls the operator API of a running service.
type apiClient struct {
	base  string
	token string
	http  *http.Client
}

func (m *Main) client() (*apiClient, error) {
	base := strings.TrimRight(m.env("COMPANION_URL", "http://127.0.0.1:8080"), "/")
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		if !strings.Contains(base, "://") && base != "" {
			return nil, usageErrorf("COMPANION_URL %q is not an http(s) URL; write it with its scheme, e.g. COMPANION_URL=http://%s", base, base)
		}
		return nil, usageErrorf("COMPANION_URL %q is not an http(s) URL such as http://127.0.0.1:8080", base)
	}
	if trimmed, ok := strings.CutSuffix(base, "/v1"); ok {
		// Copied from a request: every command would ask for /v1/v1/… and be told 404.
		return nil, usageErrorf("COMPANION_URL %q ends in /v1: give the service's address without it (the commands add /v1/…), COMPANION_URL=%s", base, trimmed)
	}
	return &apiClient{base: base, token: m.Getenv("COMPANION_TOKEN"), http: &http.Client{Timeout: 30 * time.Second}}, nil
}

// apiError is an error answer of the API, in its one error shape.
type apiError struct {
	Status  int
	Code    string `json:"code"`
	Message string `json:"message"`
	// hint says what to change on this side, for the answers whose cause is the CLI's own setting.
	hint string
}

func (e *apiError) Error() string {
	msg := fmt.Sprintf("%s (HTTP %d): %s", e.Code, e.Status, e.Message)
	if e.hint != "" {
		msg += "\n" + e.hint
	}
	return msg
}

// do sends a request and returns the body of a 2xx answer; any other answer is an *apiError.
func (c *apiClient) do(ctx context.Context, method, path string, body any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if op := (*net.OpError)(nil); errors.As(err, &op) && op.Op == "dial" {
		// Nothing listens there (or the host is not found): say what to do, as bench does.
		return nil, fmt.Errorf("cannot reach companion at %s (COMPANION_URL): %v; start it (companion serve) "+
			"or set COMPANION_URL to where it runs", c.base, op)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot reach companion at %s (COMPANION_URL): %w", c.base, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error apiError `json:"error"`
		}
		if json.Unmarshal(b, &e) != nil || e.Error.Code == "" {
			e.Error = apiError{Code: "http_error", Message: strings.TrimSpace(string(b))}
		}
		e.Error.Status = resp.StatusCode
		switch {
		case resp.StatusCode == http.StatusUnauthorized && c.token == "":
			e.Error.hint = fmt.Sprintf("The service at %s has tokens: set COMPANION_TOKEN to the secret of an operator token "+
				"(the last part of its name:tenant:operator:secret, in %s).", c.base, tokenSources)
		case resp.StatusCode == http.StatusUnauthorized && strings.Count(c.token, ":") >= 3:
			e.Error.hint = "COMPANION_TOKEN looks like a whole token line (name:tenant:role:secret): set it to the secret only, " +
				"the part after the third colon."
		case resp.StatusCode == http.StatusUnauthorized:
			e.Error.hint = fmt.Sprintf("The service at %s knows no token with the secret in COMPANION_TOKEN: check it against "+
				"its tokens, in %s.", c.base, tokenSources)
		case resp.StatusCode == http.StatusForbidden:
			e.Error.hint = "COMPANION_TOKEN is a workflow token; this command needs one of role operator."
		case resp.StatusCode == http.StatusNotFound && strings.HasPrefix(e.Error.Message, "no such endpoint"):
			// The service has the endpoint: the path COMPANION_URL put before it is the likely mistake.
			if u, err := url.Parse(c.base); err == nil && u.Path != "" {
				e.Error.hint = fmt.Sprintf("COMPANION_URL is the service's address, the part before /v1/; its path %s is not part of it here: try COMPANION_URL=%s://%s.", u.Path, u.Scheme, u.Host)
			}
		}
		return nil, &e.Error
	}
	return b, nil
}

// apiItem is what the CLI shows of an item.
type apiItem struct {
	Key              string    `json:"key"`
	State            string    `json:"state"`
	Attempt          int       `json:"attempt"`
	Destination      string    `json:"destination"`
	Dedupe           string    `json:"dedupe"`
	Reference        string    `json:"reference"`
	BatchID          string    `json:"batch_id"`
	BatchIndex       *int      `json:"batch_index"`
	Owner            string    `json:"owner"`
	NeedsPerson      bool      `json:"needs_person"`
	NeedsPersonCause string    `json:"needs_person_cause"`
	AlertStatus      string    `json:"alert_status"`
	Cause            string    `json:"cause"`
	ExternalID       string    `json:"external_id"`
	FailureClass     string    `json:"failure_class"`
	FailureMessage   string    `json:"failure_message"`
	HTTPStatus       int       `json:"http_status"`
	IdempotencyKey   string    `json:"idempotency_key"`
	UpdatedAt        time.Time `json:"updated_at"`
	CreatedAt        time.Time `json:"created_at"`
	Reason           string    `json:"reason"`
	Attempts         []struct {
		Number       int        `json:"number"`
		ExecutionID  string     `json:"execution_id"`
		StartedAt    time.Time  `json:"started_at"`
		EndedAt      *time.Time `json:"ended_at"`
		Outcome      string     `json:"outcome"`
		FailureClass string     `json:"failure_class"`
		HTTPStatus   int        `json:"http_status"`
	} `json:"attempts"`
	History []struct {
		At      time.Time `json:"at"`
		Kind    string    `json:"kind"`
		Attempt int       `json:"attempt"`
		From    string    `json:"from"`
		To      string    `json:"to"`
		Reason  string    `json:"reason"`
		Outcome string    `json:"outcome"`
		By      string    `json:"by"`
		Note    string    `json:"note"`
	} `json:"history"`
	HistoryDropped int `json:"history_dropped"`
	Resolution     *struct {
		Outcome    string    `json:"outcome"`
		Evidence   string    `json:"evidence"`
		ExternalID string    `json:"external_id"`
		By         string    `json:"by"`
		At         time.Time `json:"at"`
	} `json:"resolution"`
}

const itemsSynopsis = `Lists, shows and resolves items through the operator API.

  companion items list [--state unknown,failed] [--needs-person] [--destination D] [--workflow W]
                       [--batch B] [--execution E] [--reference R] [--owner O] [--older-than 4h]
                       [--limit N] [--cursor C] [--all] [--json]
  companion items show KEY [--json]
  companion items resolve KEY [KEY...] --outcome succeeded|not_committed|acknowledged
                       --evidence "what you checked and found" [--external-id ID] [--json]
  companion items list ... --json | jq -r '.items[].key' | companion items resolve - --outcome ... --evidence ...

  resolve --outcome succeeded: the effect exists; not_committed: it certainly does not (one more attempt).
  Both settle an unknown item, or a failed one with no attempts left. acknowledged: you have seen an item
  that neither can settle (a duplicate effect, or a retryable failure unresolved for too long) and take it
  from here; it stops needing a person and nothing else changes (no --external-id).
  Several KEYs (or -: read them from standard input, one a line, blank lines skipped) are resolved in
  turn with the same outcome and evidence, one request per key, one line per key; a key that fails does
  not stop the others (a refused token or an unreachable service does), and the exit status is then 1.
  Mistakes in the command line resolve nothing and exit 2.

` + clientEnv

func (m *Main) items(ctx context.Context, args []string) error {
	if len(args) == 0 {
		// A mistake, like an unknown subcommand: the usage goes to standard error, and the exit status is 2.
		fmt.Fprintf(m.Stderr, "usage: companion items list|show|resolve [flags]\n\n%s\n", itemsSynopsis)
		return usageErrorf("items: name a subcommand: list, show or resolve")
	}
	if isHelpFlag(args[0]) {
		fmt.Fprintf(m.Stdout, "usage: companion items list|show|resolve [flags]\n\n%s\n", itemsSynopsis)
		return nil
	}
	switch args[0] {
	case "list":
		return m.printingData(func() error { return m.itemsList(ctx, args[1:]) })
	case "show":
		return m.printingData(func() error { return m.itemsShow(ctx, args[1:]) })
	case "resolve":
		return m.printingData(func() error { return m.itemsResolve(ctx, args[1:]) })
	}
	if guess := likely(args[0], []string{"list", "show", "resolve"}); guess != "" {
		return usageErrorf("items: unknown subcommand %q (did you mean %s? run \"companion items --help\")", args[0], guess)
	}
	return usageErrorf("items: unknown subcommand %q; use list, show or resolve", args[0])
}

// listFlagMistake words the API's refusal of a list parameter ("limit: must be 1-500") as the mistake in
// the command line that it is: the flag that set it (flagOf: by query parameter), exit status 2. Other
// errors are left as they are.
func listFlagMistake(err error, flagOf map[string]string) error {
	var ae *apiError
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest {
		return err
	}
	param, problem, ok := strings.Cut(ae.Message, ": ")
	if name, known := flagOf[param]; ok && known {
		return usageErrorf("items list: --%s: %s (run \"companion items list --help\")", name, problem)
	}
	return err
}

// keyAndFlags splits "KEY --flag …": the key when it comes first, and the rest.
func keyAndFlags(args []string) (string, []string) {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return args[0], args[1:]
	}
	return "", args
}

// parseKeyed parses the flags of a command that takes one KEY, given before, between or after the
// flags ("items resolve --outcome succeeded --evidence '…' KEY" as well as "items resolve KEY --outcome …").
func (m *Main) parseKeyed(fs *flagSet, args []string) (key string, done bool, err error) {
	key, rest := keyAndFlags(args)
	if key == "" {
		// Flag parsing stops at the first argument that is not a flag: that is the key; the flags after it
		// are parsed below (help and errors are reported there, the flags parsed here are kept).
		if fs.Parse(rest) == nil && fs.NArg() > 0 {
			key, rest = fs.Arg(0), fs.Args()[1:]
		}
	}
	done, err = m.parse(fs, rest)
	return key, done, err
}

// optionalBool is a flag that is unset, true or false: --needs-person, --needs-person=false.
type optionalBool struct{ v *bool }

func (o *optionalBool) String() string {
	if o.v == nil {
		return ""
	}
	return strconv.FormatBool(*o.v)
}

func (o *optionalBool) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	o.v = &b
	return nil
}

func (o *optionalBool) IsBoolFlag() bool { return true }

// seconds reads a duration as Go writes it (90m, 4h) or as whole seconds.
func seconds(s string) (int64, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 {
		return n, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a duration such as 90m or 4h, or whole seconds", s)
	}
	return int64(d / time.Second), nil
}

func (m *Main) itemsList(ctx context.Context, args []string) error {
	fs := m.newFlags("items list", itemsSynopsis)
	var needs optionalBool
	state := fs.String("state", "", "only these `states`, separated by commas (unknown,failed)")
	fs.Var(&needs, "needs-person", "only items that need a person (--needs-person=false: the others)")
	destination := fs.String("destination", "", "only this `destination`")
	workflow := fs.String("workflow", "", "only this `workflow` (the key's first part)")
	batch := fs.String("batch", "", "only the items of this `batch id`")
	execution := fs.String("execution", "", "only items whose latest claim came from this `execution id`")
	reference := fs.String("reference", "", "only items of this business `reference` (exact)")
	owner := fs.String("owner", "", "only items of this `owner` (named by the request, or alerted)")
	olderThan := fs.String("older-than", "", "only items unchanged for this `duration` (90m, 4h, or seconds)")
	limit := fs.Int("limit", 100, "items per page, 1-500")
	cursor := fs.String("cursor", "", "continue after a previous page's next `cursor`")
	all := fs.Bool("all", false, "follow the cursor to the last page")
	asJSON := fs.Bool("json", false, "print the API's JSON")
	if done, err := m.parse(fs, args); done {
		return err
	}
	q := url.Values{}
	flagOf := map[string]string{} // the flag that set each query parameter, to name it if the service refuses the value
	set := func(param, flag, v string) { q.Set(param, v); flagOf[param] = flag }
	for _, p := range []struct{ param, flag, v string }{{"state", "state", *state}, {"destination", "destination", *destination},
		{"workflow", "workflow", *workflow}, {"batch_id", "batch", *batch}, {"execution_id", "execution", *execution},
		{"reference", "reference", *reference}, {"owner", "owner", *owner}, {"cursor", "cursor", *cursor}} {
		if p.v != "" {
			set(p.param, p.flag, p.v)
		}
	}
	if needs.v != nil {
		set("needs_person", "needs-person", strconv.FormatBool(*needs.v))
	}
	if *olderThan != "" {
		n, err := seconds(*olderThan)
		if err != nil {
			return usageErrorf("items list --older-than: %v", err)
		}
		set("older_than", "older-than", strconv.FormatInt(n, 10))
	}
	set("limit", "limit", strconv.Itoa(*limit))
	c, err := m.client()
	if err != nil {
		return err
	}
	var listed []apiItem
	var raw []json.RawMessage
	var unreadable []string
	next := ""
	for {
		b, err := c.do(ctx, http.MethodGet, "/v1/items?"+q.Encode(), nil)
		if err != nil {
			return listFlagMistake(err, flagOf)
		}
		var page struct {
			Items      []json.RawMessage `json:"items"`
			NextCursor string            `json:"next_cursor"`
			Unreadable []string          `json:"unreadable"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			return fmt.Errorf("unexpected answer from %s: %w", c.base, err)
		}
		for _, r := range page.Items {
			var it apiItem
			if err := json.Unmarshal(r, &it); err != nil {
				return fmt.Errorf("unexpected answer from %s: %w", c.base, err)
			}
			listed = append(listed, it)
		}
		raw = append(raw, page.Items...)
		unreadable = append(unreadable, page.Unreadable...)
		next = page.NextCursor
		if !*all || next == "" {
			break
		}
		q.Set("cursor", next)
	}
	if *asJSON {
		if raw == nil {
			raw = []json.RawMessage{}
		}
		out := map[string]any{"items": raw, "next_cursor": next}
		if len(unreadable) > 0 {
			out["unreadable"] = unreadable
		}
		return writeJSON(m.Stdout, out)
	}
	now := time.Now()
	tw := tabwriter.NewWriter(m.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tSTATE\tATTEMPT\tDESTINATION\tREFERENCE\tNEEDS PERSON\tCHANGED")
	for _, it := range listed {
		needs := "-"
		if it.NeedsPerson {
			needs = it.NeedsPersonCause
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s ago\n", it.Key, it.State, it.Attempt, it.Destination, dash(it.Reference), needs,
			items.Age(now.Sub(it.UpdatedAt)))
	}
	tw.Flush()
	fmt.Fprintf(m.Stdout, "%d item(s)", len(listed))
	if next != "" {
		fmt.Fprintf(m.Stdout, "; more with --cursor %s (or --all)", next)
	}
	fmt.Fprintln(m.Stdout)
	if len(unreadable) > 0 {
		fmt.Fprintf(m.Stdout, "%d more item(s) cannot be read from the ledger (corrupt) and are left out: %s\n",
			len(unreadable), strings.Join(unreadable, ", "))
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (m *Main) itemsShow(ctx context.Context, args []string) error {
	fs := m.newFlags("items show", itemsSynopsis)
	asJSON := fs.Bool("json", false, "print the API's JSON")
	key, done, err := m.parseKeyed(fs, args)
	if done {
		return err
	}
	if key == "" {
		return usageErrorf("items show: give the item's KEY")
	}
	c, err := m.client()
	if err != nil {
		return err
	}
	b, err := c.do(ctx, http.MethodGet, "/v1/items/"+url.PathEscape(key), nil)
	if err != nil {
		return err
	}
	if *asJSON {
		return m.printJSON(b)
	}
	return m.printItem(b)
}

// printJSON prints an answer of the API, indented.
func (m *Main) printJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	return writeJSON(m.Stdout, v)
}

// printItem prints an item for a person: its fields, attempts and history.
func (m *Main) printItem(b []byte) error {
	var it apiItem
	if err := json.Unmarshal(b, &it); err != nil {
		return fmt.Errorf("unexpected answer: %w", err)
	}
	tw := tabwriter.NewWriter(m.Stdout, 0, 4, 2, ' ', 0)
	row := func(name, value string) {
		if value != "" {
			fmt.Fprintf(tw, "%s\t%s\n", name, value)
		}
	}
	row("key", it.Key)
	row("state", it.State+parens(it.Cause))
	row("attempt", strconv.Itoa(it.Attempt))
	row("destination", it.Destination+parens("dedupe "+dash(it.Dedupe)))
	row("reference", it.Reference)
	if it.BatchID != "" {
		idx := ""
		if it.BatchIndex != nil {
			idx = fmt.Sprintf(" #%d", *it.BatchIndex)
		}
		row("batch", it.BatchID+idx)
	}
	row("owner", it.Owner)
	if it.NeedsPerson {
		row("needs person", it.NeedsPersonCause+parens("alert "+dash(it.AlertStatus)))
	}
	row("external id", it.ExternalID)
	lastError := it.FailureClass
	if it.HTTPStatus != 0 {
		lastError = fmt.Sprintf("http %d", it.HTTPStatus)
	}
	if it.FailureMessage != "" {
		lastError += ": " + it.FailureMessage
	}
	row("last error", lastError)
	row("idempotency key", it.IdempotencyKey)
	row("created", it.CreatedAt.Format(time.RFC3339))
	row("changed", it.UpdatedAt.Format(time.RFC3339))
	if r := it.Resolution; r != nil {
		row("resolved", fmt.Sprintf("%s by %s at %s", r.Outcome, r.By, r.At.Format(time.RFC3339)))
		row("evidence", r.Evidence)
		row("resolved external id", r.ExternalID)
	}
	tw.Flush()
	if len(it.Attempts) > 0 {
		fmt.Fprintln(m.Stdout, "\nattempts:")
		tw = tabwriter.NewWriter(m.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  #\tSTARTED\tOUTCOME\tERROR\tEXECUTION")
		for _, a := range it.Attempts {
			class := a.FailureClass
			if a.HTTPStatus != 0 {
				class = fmt.Sprintf("http %d", a.HTTPStatus)
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\n", a.Number, a.StartedAt.Format(time.RFC3339), dash(a.Outcome), dash(class), dash(a.ExecutionID))
		}
		tw.Flush()
	}
	if len(it.History) > 0 {
		fmt.Fprintln(m.Stdout, "\nhistory:")
		if it.HistoryDropped > 0 {
			fmt.Fprintf(m.Stdout, "  (%d repeated reports not kept: of reports that changed nothing, the history keeps the first %d and the latest %d; of duplicate effects, %d and %d)\n",
				it.HistoryDropped, items.KeptFirstRepeats, items.KeptLatestRepeats, items.KeptFirstDuplicates, items.KeptLatestDuplicates)
		}
		for _, h := range it.History {
			line := fmt.Sprintf("  %s  %s", h.At.Format(time.RFC3339), h.Kind)
			if h.From != "" || h.To != "" {
				line += fmt.Sprintf(" %s→%s", dash(h.From), dash(h.To))
			}
			for _, part := range []string{h.Reason, h.Outcome} {
				if part != "" {
					line += " " + part
				}
			}
			if h.By != "" {
				line += " by " + h.By
			}
			if h.Note != "" {
				line += ": " + h.Note
			}
			fmt.Fprintln(m.Stdout, line)
		}
	}
	return nil
}

func parens(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

// parseKeys parses the flags of a command that takes one or more KEYs, given before, between or after
// the flags: every argument that is not a flag is a key, in the order given.
func (m *Main) parseKeys(fs *flagSet, args []string) (keys []string, done bool, err error) {
	for {
		if fs.Parse(args) != nil {
			// Help, or a mistake: parse reports it (the flags parsed before are kept).
			done, err = m.parse(fs, args)
			return keys, done, err
		}
		if fs.NArg() == 0 {
			return keys, false, nil
		}
		keys, args = append(keys, fs.Arg(0)), fs.Args()[1:]
	}
}

// maxKeyLine bounds one line of the keys read from standard input: far above any key the API accepts.
const maxKeyLine = 1 << 20

// readKeys reads keys from r, one a line: surrounding spaces (and a Windows \r) trimmed, blank lines skipped.
func readKeys(r io.Reader) ([]string, error) {
	var keys []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxKeyLine)
	for sc.Scan() {
		if k := strings.TrimSpace(sc.Text()); k != "" {
			keys = append(keys, k)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("items resolve: reading the keys from standard input: %w", err)
	}
	return keys, nil
}

// resolveKeys is the keys to resolve: the arguments in order, "-" replaced by the keys read from standard
// input, each key once.
func (m *Main) resolveKeys(args []string) ([]string, error) {
	var keys []string
	seen := map[string]bool{}
	stdin := false
	for _, a := range args {
		more := []string{a}
		if a == "-" {
			if stdin {
				return nil, usageErrorf("items resolve: give - (read the keys from standard input) once")
			}
			stdin = true
			if f, ok := m.Stdin.(*os.File); ok {
				if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
					// A person at a terminal, not a pipe: say what the command waits for.
					fmt.Fprintln(m.Stderr, "items resolve: reading the keys from standard input, one a line; end with Ctrl-D")
				}
			}
			var err error
			if more, err = readKeys(m.stdin()); err != nil {
				return nil, err
			}
			if len(more) == 0 {
				return nil, usageErrorf("items resolve: - read no keys from standard input (one a line); nothing was resolved")
			}
		}
		for _, k := range more {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	return keys, nil
}

// endsRun reports whether err, the answer for one key, would be the answer for every key: the service
// cannot be reached, refuses the token, or the run was interrupted.
func endsRun(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return true
	}
	var ae *apiError
	if !errors.As(err, &ae) {
		return true
	}
	return ae.Status == http.StatusUnauthorized || ae.Status == http.StatusForbidden
}

func (m *Main) itemsResolve(ctx context.Context, args []string) error {
	fs := m.newFlags("items resolve", itemsSynopsis)
	outcome := fs.String("outcome", "", "`succeeded` (the effect exists), not_committed (it certainly does not) or acknowledged (seen; nothing changes)")
	evidence := fs.String("evidence", "", "what you checked and what you found (at least 10 characters)")
	externalID := fs.String("external-id", "", "the destination's `id` of the record, when you found it")
	asJSON := fs.Bool("json", false, "print the API's JSON (several keys: one line of JSON each, {\"key\",\"error\"} for a key that failed)")
	args, done, err := m.parseKeys(fs, args)
	if done {
		return err
	}
	switch {
	case len(args) == 0:
		return usageErrorf("items resolve: give the item's KEY (several KEYs, or - to read them from standard input, one a line)")
	case !slices.Contains([]string{"succeeded", "not_committed", "acknowledged"}, *outcome):
		return usageErrorf("items resolve: --outcome must be succeeded, not_committed or acknowledged")
	case strings.TrimSpace(*evidence) == "":
		return usageErrorf("items resolve: --evidence is required: say where you looked and what you found")
	case len(strings.TrimSpace(*evidence)) < items.MinEvidenceLength:
		return usageErrorf("items resolve: --evidence must be at least %d characters: say where you looked and what you found", items.MinEvidenceLength)
	case *outcome == "acknowledged" && *externalID != "":
		return usageErrorf("items resolve: --external-id goes with --outcome succeeded only: acknowledged changes no result")
	case *externalID != "" && len(args) > 1:
		return usageErrorf("items resolve: --external-id names one record: give it with one KEY only")
	}
	c, err := m.client()
	if err != nil {
		return err
	}
	keys, err := m.resolveKeys(args)
	if err != nil {
		return err
	}
	body := map[string]any{"outcome": *outcome, "evidence": *evidence}
	if *externalID != "" {
		body["external_id"] = *externalID
	}
	if len(keys) == 1 && args[0] != "-" {
		// One key named on the command line: its answer, or its error as the command's.
		b, err := c.do(ctx, http.MethodPost, "/v1/items/"+url.PathEscape(keys[0])+"/resolve", body)
		if err != nil {
			return err
		}
		if *asJSON {
			return m.printJSON(b)
		}
		return m.printResolved(b, *outcome)
	}
	// Several keys: each its own request, one line each; a key that fails does not stop the others.
	var failed []string
	for i, key := range keys {
		b, err := c.do(ctx, http.MethodPost, "/v1/items/"+url.PathEscape(key)+"/resolve", body)
		if err == nil && *asJSON {
			var v any
			if err = json.Unmarshal(b, &v); err == nil {
				err = json.NewEncoder(m.Stdout).Encode(v)
			}
		} else if err == nil {
			err = m.printResolved(b, *outcome)
		}
		if err == nil {
			continue
		}
		failed = append(failed, key)
		words := strings.ReplaceAll(err.Error(), "\n", " ")
		if *asJSON {
			e := map[string]any{"code": "error", "message": words}
			if ae := (*apiError)(nil); errors.As(err, &ae) {
				e = map[string]any{"code": ae.Code, "message": ae.Message, "status": ae.Status}
			}
			_ = json.NewEncoder(m.Stdout).Encode(map[string]any{"key": key, "error": e})
		} else {
			fmt.Fprintf(m.Stdout, "%s not resolved: %s\n", key, words)
		}
		if endsRun(ctx, err) && i+1 < len(keys) {
			return fmt.Errorf("items resolve: stopped at %s (key %d of %d), whose answer would be every key's; %d resolved before it, "+
				"%d not tried", key, i+1, len(keys), i+1-len(failed), len(keys)-i-1)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("items resolve: %d of %d keys not resolved (%s); %d resolved (or already were)",
			len(failed), len(keys), someKeys(failed), len(keys)-len(failed))
	}
	return nil
}

// someKeys names keys for an error line: all of them, or the first ten and how many more (each has its
// own line above).
func someKeys(keys []string) string {
	const shown = 10
	if len(keys) <= shown {
		return strings.Join(keys, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(keys[:shown], ", "), len(keys)-shown)
}

// tokenSources are the places a service takes its tokens from, as the messages about a token it does
// not know name them: the service's operator may have used any of them.
const tokenSources = "its COMPANION_TOKENS, the file its COMPANION_TOKENS_FILE names, or tokens: in its config file"

// printResolved prints the answer to one resolve request in a line that begins or ends with its key.
func (m *Main) printResolved(b []byte, outcome string) error {
	var it apiItem
	if err := json.Unmarshal(b, &it); err != nil {
		return fmt.Errorf("unexpected answer: %w", err)
	}
	if r := it.Resolution; it.Reason == "unchanged" && r != nil {
		fmt.Fprintf(m.Stdout, "%s was already resolved as %s by %s at %s, with the same evidence; nothing changed (state %s)\n",
			it.Key, r.Outcome, r.By, r.At.Format(time.RFC3339), it.State)
		return nil
	}
	if outcome == "acknowledged" {
		fmt.Fprintf(m.Stdout, "resolved %s as acknowledged: still %s, needs no person\n", it.Key, it.State)
		return nil
	}
	fmt.Fprintf(m.Stdout, "resolved %s as %s: now %s\n", it.Key, outcome, it.State)
	return nil
}

const statsSynopsis = `Shows the post-release measures of the token's tenant, in total and per destination: items per
state, items needing a person, the oldest unresolved age, retries, fingerprint conflicts, same-key
recoveries, manual resolutions, duplicate effects, removed items, and the repeated reports the
items' histories dropped (not 0: a workflow replays its reports in a loop; docs/operators.md), as two
tables that fit 100 columns (--wide: one table).

  companion stats --since 7d --step 1d [--destination billing]

prints the measures over time instead (GET /v1/stats/series): one row per hour or day (UTC) up to
now, what happened to the claims and how the items were settled, and the releases in that span.

` + clientEnv

// apiMeasures are the measures GET /v1/stats answers.
type apiMeasures struct {
	Items                      int            `json:"items"`
	States                     map[string]int `json:"states"`
	NeedsPerson                int            `json:"needs_person"`
	EnteredUnknown             int            `json:"entered_unknown"`
	OldestUnresolvedAgeSeconds int64          `json:"oldest_unresolved_age_seconds"`
	Retries                    int            `json:"retries"`
	RetriesPerOperation        float64        `json:"retries_per_operation"`
	FingerprintConflicts       int            `json:"fingerprint_conflicts"`
	SameKeyRecoveries          int            `json:"same_key_recoveries"`
	ManualResolutions          int            `json:"manual_resolutions"`
	DuplicateEffects           int            `json:"duplicate_effects"`
	Removed                    int            `json:"removed"`
	HistoryDropped             int            `json:"history_dropped"`
}

func (m *Main) stats(ctx context.Context, args []string) error {
	fs := m.newFlags("stats", statsSynopsis)
	asJSON := fs.Bool("json", false, "print the API's JSON")
	since := fs.String("since", "", "print the measures over time from this `span` ago to now (7d, 48h, 90m) instead of the totals; "+
		"--step or --destination alone print the last 48 hours by hour, or 30 days by day")
	step := fs.String("step", "", "the measures over time: one row per `1h or 1d` (default 1h up to --since 48h, else 1d)")
	destination := fs.String("destination", "", "the measures over time of this `destination` only (default all together)")
	wide := fs.Bool("wide", false, "print the measures as one table, a row per destination (wider than 100 columns)")
	if done, err := m.parse(fs, args); done {
		return err
	}
	c, err := m.client()
	if err != nil {
		return err
	}
	if *since != "" || *step != "" || *destination != "" {
		return m.statsSeries(ctx, c, *since, *step, *destination, *asJSON)
	}
	b, err := c.do(ctx, http.MethodGet, "/v1/stats", nil)
	if err != nil {
		return err
	}
	if *asJSON {
		return m.printJSON(b)
	}
	var st struct {
		apiMeasures
		Tenant       string                 `json:"tenant"`
		At           time.Time              `json:"at"`
		Destinations map[string]apiMeasures `json:"destinations"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return errors.New("unexpected answer from /v1/stats")
	}
	fmt.Fprintf(m.Stdout, "tenant %s at %s\n\n", st.Tenant, st.At.Format(time.RFC3339))
	names := append(slices.Sorted(maps.Keys(st.Destinations)), "all")
	measures := func(name string) apiMeasures {
		if name == "all" {
			return st.apiMeasures
		}
		return st.Destinations[name]
	}
	for i, t := range statsTables(*wide) {
		if i > 0 {
			fmt.Fprintln(m.Stdout)
		}
		tw := tabwriter.NewWriter(m.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "DESTINATION\t"+strings.Join(t.headers, "\t")+"\t")
		for _, name := range names {
			fmt.Fprintln(tw, name+"\t"+strings.Join(t.cells(measures(name)), "\t")+"\t")
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if t.note != "" {
			fmt.Fprintln(m.Stdout, t.note)
		}
	}
	return nil
}

// statsTable is one table of companion stats: its columns after DESTINATION, and each row's cells.
type statsTable struct {
	headers []string
	cells   func(apiMeasures) []string
	note    string // printed under the table: what its shortened headers stand for
}

// statsTables returns the tables companion stats prints: two that fit 100 columns, the states and who
// waits, then how the items were settled; or, wide, both as one table of a row per destination.
func statsTables(wide bool) []statsTable {
	states := statsTable{
		headers: []string{"ITEMS", "IN_FLIGHT", "SUCCEEDED", "FAILED", "UNKNOWN", "NEEDS PERSON", "OLDEST UNRESOLVED"},
		cells: func(m apiMeasures) []string {
			oldest := "-"
			if m.OldestUnresolvedAgeSeconds > 0 {
				oldest = items.Age(time.Duration(m.OldestUnresolvedAgeSeconds) * time.Second)
			}
			return []string{strconv.Itoa(m.Items), strconv.Itoa(m.States["in_flight"]), strconv.Itoa(m.States["succeeded"]),
				strconv.Itoa(m.States["failed"]), strconv.Itoa(m.States["unknown"]), strconv.Itoa(m.NeedsPerson), oldest}
		},
	}
	settled := statsTable{
		headers: []string{"RETRIES", "CONFLICTS", "SAME-KEY", "BY HAND", "DUPLICATES", "REMOVED", "DROPPED REPEATS"},
		cells: func(m apiMeasures) []string {
			return []string{strconv.Itoa(m.Retries), strconv.Itoa(m.FingerprintConflicts), strconv.Itoa(m.SameKeyRecoveries),
				strconv.Itoa(m.ManualResolutions), strconv.Itoa(m.DuplicateEffects), strconv.Itoa(m.Removed), strconv.Itoa(m.HistoryDropped)}
		},
		note: "SAME-KEY: recovered by a retry with the same key; BY HAND: resolved by a person (--wide: one table)",
	}
	if !wide {
		return []statsTable{states, settled}
	}
	return []statsTable{{
		headers: append(slices.Clone(states.headers), "RETRIES", "CONFLICTS", "SAME-KEY RECOVERIES", "RESOLVED BY HAND", "DUPLICATES", "REMOVED", "DROPPED REPEATS"),
		cells:   func(m apiMeasures) []string { return append(states.cells(m), settled.cells(m)...) },
	}}
}
