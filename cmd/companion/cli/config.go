package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/replaysafe/companion/alerts"
	"github.com/replaysafe/companion/handlers"
	"github.com/replaysafe/companion/internal/typo"
	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/probes"
)

// fileConfig is the YAML configuration file (--config, COMPANION_CONFIG). Unknown fields are refused.
// Further sections (slack, sweep, …) are added here as fields.
type fileConfig struct {
	// Defaults apply to every destination, and fill what a destination's own entry leaves out.
	Defaults destinationConfig `yaml:"defaults"`
	// Destinations by the name before-write requests give in "destination".
	Destinations map[string]destinationConfig `yaml:"destinations"`
	// Tokens are bearer tokens; their secrets come from the environment or a file, never from here.
	Tokens []tokenConfig `yaml:"tokens"`
	// Alerts routes the alerts of items that need a person (sweep.go).
	Alerts alertsConfig `yaml:"alerts"`
	// PublicURL is the service's address as people reach it; alert lines link to the console under it.
	// COMPANION_PUBLIC_URL overrides it.
	PublicURL field[string] `yaml:"public_url"`
	// MaxClockSkew is how far the clocks of the replicas sharing a store may differ (items.Config): a Go
	// duration or whole seconds; default 2 s.
	MaxClockSkew field[durationValue] `yaml:"max_clock_skew"`
	// Series says how long the measures over time are kept (series.go).
	Series seriesConfig `yaml:"series"`
	// AllowedHosts are the Host names a service with tokens answers besides the loopback ones
	// (handlers.Config); COMPANION_ALLOWED_HOSTS overrides them.
	AllowedHosts []field[string] `yaml:"allowed_hosts"`
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names the client (handlers.Config);
	// COMPANION_TRUSTED_PROXIES overrides them.
	TrustedProxies []field[string] `yaml:"trusted_proxies"`
	// Tenants say, per tenant, which owners its requests may name.
	Tenants map[string]tenantConfig `yaml:"tenants"`
}

// tenantConfig is what the configuration says about one tenant.
type tenantConfig struct {
	// Owners are the owners (Slack users or channels) the tenant's requests may name in owner.
	Owners []field[string] `yaml:"owners"`
}

// destinationConfig is what the configuration says about one destination.
type destinationConfig struct {
	Dedupe                   field[string] `yaml:"dedupe"`
	MaxAttempts              field[int]    `yaml:"max_attempts"`
	LeaseSeconds             field[int]    `yaml:"lease_seconds"`
	KeyRetentionSeconds      field[int]    `yaml:"key_retention_seconds"`
	ServerErrorsNotCommitted field[bool]   `yaml:"server_errors_not_committed"`
	Owner                    field[string] `yaml:"owner"`
	EscalateTo               field[string] `yaml:"escalate_to"`
	// EscalateAfter is a Go duration ("30m", "4h") or whole seconds.
	EscalateAfter field[durationValue] `yaml:"escalate_after"`
	CheckHint     field[string]        `yaml:"check_hint"`
	// Retention is how long a settled item is kept after its last change: a Go duration ("720h") or
	// whole seconds.
	Retention field[durationValue] `yaml:"retention"`
	// Lookup makes the service probe the destination's unknown items itself (probes.go).
	Lookup *lookupConfig `yaml:"lookup"`
	// Tenants are the tenants whose requests may name the destination; none: every tenant.
	Tenants []field[string] `yaml:"tenants"`
}

// tokenConfig is one token of the file. The secret is named, not written: secret_env is an environment
// variable holding it (or, when that is unset, <secret_env>_FILE naming a file), secret_file a file.
type tokenConfig struct {
	Name       field[string] `yaml:"name"`
	Tenant     field[string] `yaml:"tenant"`
	Role       field[string] `yaml:"role"`
	SecretEnv  field[string] `yaml:"secret_env"`
	SecretFile field[string] `yaml:"secret_file"`
	// Secret is declared only to refuse it with a useful message.
	Secret field[string] `yaml:"secret"`
}

// field is a configuration value with the line it came from, so that problems found after decoding
// still name the line. A value of the wrong type is kept as a problem rather than failing the decoding,
// so that the message can name the field.
type field[T any] struct {
	Value T
	Line  int
	Set   bool
	bad   string
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (f *field[T]) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil // "key:" with no value is absent
	}
	f.Line, f.Set = n.Line, true
	if u, ok := any(&f.Value).(interface{ fromYAML(*yaml.Node) string }); ok {
		f.bad = u.fromYAML(n)
		return nil
	}
	if err := n.Decode(&f.Value); err != nil {
		f.bad = "must be " + kindName(reflect.TypeFor[T]().Kind()) + ", not " + describe(n)
	}
	return nil
}

func kindName(k reflect.Kind) string {
	switch k {
	case reflect.Int:
		return "a whole number"
	case reflect.Bool:
		return "true or false"
	case reflect.Float64:
		return "a number"
	}
	return "text"
}

func describe(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		return fmt.Sprintf("%q", n.Value)
	}
	return map[yaml.Kind]string{yaml.MappingNode: "a mapping", yaml.SequenceNode: "a list"}[n.Kind]
}

// durationValue is a duration written as a Go duration or as whole seconds.
type durationValue time.Duration

func (d *durationValue) fromYAML(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" {
		var s int64
		if err := n.Decode(&s); err == nil {
			*d = durationValue(time.Duration(s) * time.Second)
			return ""
		}
	}
	v, err := time.ParseDuration(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil {
		problem := "must be a duration such as 30m or 4h, or whole seconds, not " + describe(n)
		// Days are the unit people reach for (retention: 30d), and Go's durations have none.
		if days, ok := strings.CutSuffix(n.Value, "d"); ok && n.Kind == yaml.ScalarNode {
			if d, err := strconv.Atoi(days); err == nil && d > 0 {
				problem += fmt.Sprintf(" (a duration has no days: write %dh)", d*24)
			}
		}
		return problem
	}
	*d = durationValue(v)
	return ""
}

// configProblems collects what is wrong with a configuration file, each with its line.
type configProblems struct {
	path string
	list []string
}

func (p *configProblems) add(line int, name, problem string) {
	p.list = append(p.list, fmt.Sprintf("line %d: %s: %s", line, name, problem))
}

func (p *configProblems) err() error {
	if len(p.list) == 0 {
		return nil
	}
	slices.SortStableFunc(p.list, func(a, b string) int { return problemLine(a) - problemLine(b) })
	return fmt.Errorf("config %s:\n  %s", p.path, strings.Join(p.list, "\n  "))
}

// loadConfig reads and checks the configuration file. getenv resolves the secrets of its tokens.
// It returns the ledger's configuration, the alert routing, the tokens and the public URL.
func loadConfig(path string, getenv func(string) string) (items.Config, alerts.Routing, []handlers.Token, string, error) {
	f, err := readConfig(path, getenv)
	return f.cfg, f.routing, f.tokens, f.publicURL, err
}

// fileSettings is what the configuration file says (and, from settings, the environment with it).
type fileSettings struct {
	cfg     items.Config
	routing alerts.Routing
	tokens  []handlers.Token
	lookups map[string]probes.Lookup
	// publicURL is the service's address as people reach it; empty when the file names none.
	publicURL string
	// allowedHosts and trustedProxies are the edge's (handlers.Config).
	allowedHosts, trustedProxies []string
}

// readConfig reads and checks the configuration file, lookups included. getenv resolves the secrets of
// its tokens and lookup headers.
func readConfig(path string, getenv func(string) string) (fileSettings, error) {
	fc, probs, err := decodeConfig(path)
	if err != nil {
		return fileSettings{}, err
	}
	lookups := map[string]probes.Lookup{}
	if fc.Defaults.Lookup != nil {
		probs.add(fc.Defaults.Lookup.line(), "defaults.lookup", "a lookup belongs to one destination; give it under destinations.<name>.lookup")
	}
	cfg := items.Config{Defaults: fc.Defaults.destination("defaults", probs), Destinations: map[string]items.Destination{},
		MaxClockSkew: items.DefaultMaxClockSkew}
	if check(fc.MaxClockSkew, "max_clock_skew", probs) {
		if v := time.Duration(fc.MaxClockSkew.Value); v < 0 {
			probs.add(fc.MaxClockSkew.Line, "max_clock_skew", "must not be negative")
		} else {
			cfg.MaxClockSkew = v
		}
	}
	fc.Series.apply(&cfg, probs)
	names := slices.Sorted(maps.Keys(fc.Destinations))
	for _, name := range names {
		dc := fc.Destinations[name]
		cfg.Destinations[name] = dc.destination("destinations."+name, probs)
		// The ledger fills a destination's unset fields from the defaults, so false cannot undo a true there.
		if f := dc.ServerErrorsNotCommitted; f.Set && !f.Value && cfg.Defaults.ServerErrorsNotCommitted {
			probs.add(f.Line, "destinations."+name+".server_errors_not_committed",
				"false cannot override true under defaults; set it per destination instead of under defaults")
		}
		if dc.Lookup != nil {
			lookups[name] = dc.Lookup.lookup("destinations."+name+".lookup", getenv, probs)
			d := cfg.Destinations[name]
			switch {
			case !dc.Dedupe.Set:
				d.Dedupe = items.DedupeLookup // a destination that can be looked up dedupes by lookup
				cfg.Destinations[name] = d
			case d.Dedupe != items.DedupeLookup:
				probs.add(dc.Dedupe.Line, "destinations."+name+".dedupe", fmt.Sprintf(
					"is %s, but the destination has a lookup: probes settle only items whose dedupe is lookup; write dedupe: lookup or leave it out", dc.Dedupe.Value))
			}
		}
	}
	// A retention shorter than the key retention, with the defaults filled in (either may come from them).
	// A retention already refused (not positive, not a duration) is not named twice.
	refused := func(f field[durationValue]) bool { return f.Set && f.Value <= 0 }
	if problem := cfg.Check(""); problem != "" && !refused(fc.Defaults.Retention) {
		probs.add(max(fc.Defaults.Retention.Line, fc.Defaults.KeyRetentionSeconds.Line), "defaults.retention", retentionProblem(cfg, "", problem))
	}
	for _, name := range names {
		dc := fc.Destinations[name]
		if problem := cfg.Check(name); problem != "" && !refused(dc.Retention) && (dc.Retention.Set || !refused(fc.Defaults.Retention)) {
			probs.add(max(dc.Retention.Line, dc.KeyRetentionSeconds.Line, fc.Defaults.Retention.Line), "destinations."+name+".retention", retentionProblem(cfg, name, problem))
		}
	}
	var tokens []handlers.Token
	for i, tc := range fc.Tokens {
		if t, ok := tc.token(fmt.Sprintf("tokens[%d]", i), getenv, probs); ok {
			tokens = append(tokens, t)
		}
	}
	routing := fc.Alerts.routing(probs)
	if f := fc.PublicURL; f.Set {
		if err := checkPublicURL(f.Value); err != nil {
			probs.add(f.Line, "public_url", err.Error())
		}
	}
	for _, name := range slices.Sorted(maps.Keys(fc.Tenants)) {
		where := "tenants." + name
		owners := listOf(fc.Tenants[name].Owners, where+".owners", func(string) string { return "" }, probs)
		if !items.ValidKeyPart(name) {
			probs.add(problemLineOf(fc.Tenants[name].Owners), where, fmt.Sprintf("%q is not a tenant: a tenant %s", name, items.PartRule))
		}
		if len(owners) > 0 {
			if cfg.Owners == nil {
				cfg.Owners = map[string][]string{}
			}
			cfg.Owners[name] = owners
		}
	}
	cfg.RoutedOwners = configOwners(cfg, routing)
	settings := fileSettings{cfg: cfg, routing: routing, tokens: tokens, lookups: lookups, publicURL: fc.PublicURL.Value,
		allowedHosts:   listOf(fc.AllowedHosts, "allowed_hosts", handlers.CheckAllowedHost, probs),
		trustedProxies: listOf(fc.TrustedProxies, "trusted_proxies", checkTrustedProxy, probs)}
	if err := probs.err(); err != nil {
		return fileSettings{}, err
	}
	return settings, nil
}

// listOf reads a list of text entries, each checked by problem ("" for a good one); the entries with a
// problem are named with their line and left out.
func listOf(list []field[string], where string, problem func(string) string, probs *configProblems) []string {
	var out []string
	for i, f := range list {
		name := fmt.Sprintf("%s[%d]", where, i)
		if !check(f, name, probs) {
			continue
		}
		v := strings.TrimSpace(f.Value)
		if p := problem(v); p != "" {
			probs.add(f.Line, name, fmt.Sprintf("%q %s", v, p))
			continue
		}
		if v == "" {
			probs.add(f.Line, name, "is empty")
			continue
		}
		out = append(out, v)
	}
	return out
}

// problemLineOf is the line of a list's first entry, for a problem of the list as a whole.
func problemLineOf(list []field[string]) int {
	for _, f := range list {
		if f.Line > 0 {
			return f.Line
		}
	}
	return 0
}

// checkTrustedProxy returns what is wrong with a trusted_proxies entry: an IP address or a CIDR range.
func checkTrustedProxy(s string) string {
	if net.ParseIP(s) != nil {
		return ""
	}
	if _, _, err := net.ParseCIDR(s); err == nil {
		return ""
	}
	return "is not an IP address or a CIDR range such as 10.0.0.0/8"
}

// splitList reads a comma-separated environment variable's entries, each checked by problem.
func splitList(name, value string, problem func(string) string) ([]string, error) {
	var out []string
	for _, v := range strings.Split(value, ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		if p := problem(v); p != "" {
			return nil, usageErrorf("%s: %q %s", name, v, p)
		}
		out = append(out, v)
	}
	return out, nil
}

// decodeConfig reads the configuration file and decodes it, refusing unknown fields. It returns an error
// for a file that cannot be read or is not YAML; otherwise the problems found so far (unknown fields, a
// misplaced list), to which the caller adds those of the fields it checks, so that one run names every
// problem of the file, not one per try.
func decodeConfig(path string) (fileConfig, *configProblems, error) {
	var fc fileConfig
	b, err := os.ReadFile(path)
	if err != nil {
		return fc, nil, configReadError(path, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	probs := &configProblems{path: path}
	if err := dec.Decode(&fc); err != nil && !errors.Is(err, io.EOF) {
		var root yaml.Node
		_ = yaml.Unmarshal(b, &root) // the same text decoded once more, for the paths of unknown fields
		problems := yamlProblems(err, &root, b)
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			// Not YAML: nothing was decoded, so there is nothing more to check.
			return fc, nil, fmt.Errorf("config %s:\n  %s", path, strings.Join(problems, "\n  "))
		}
		// An unknown field or a misplaced list: the rest was decoded.
		probs.list = problems
	}
	return fc, probs, nil
}

// retentionProblem is the ledger's problem with a destination's retention and what to write instead:
// at least its key retention, in the units a person writes (86400 s: 24h).
func retentionProblem(cfg items.Config, name, problem string) string {
	least := (time.Duration(cfg.Destination(name).KeyRetentionSeconds) * time.Second).String()
	if h, ok := strings.CutSuffix(least, "h0m0s"); ok {
		least = h + "h"
	} else if m, ok := strings.CutSuffix(least, "m0s"); ok {
		least = m + "m"
	}
	return problem + "; give a retention of " + least + " or more"
}

// configReadError words a configuration file that cannot be read: which file (by its absolute path too,
// when it was given relative to the working directory, the usual cause of a file not found), why, and
// what to do. Leaving --config out is a real choice: every destination then runs on the defaults.
func configReadError(path string, err error) error {
	name := path
	if abs, absErr := filepath.Abs(path); absErr == nil && abs != path {
		name = fmt.Sprintf("%s (%s)", path, abs)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("config %s: no such file; give the path of your YAML file with --config or COMPANION_CONFIG "+
			"(docs/configuration.md), or leave both out to run every destination on the defaults", name)
	case errors.Is(err, syscall.EISDIR):
		return fmt.Errorf("config %s: is a directory; give the YAML file in it with --config or COMPANION_CONFIG", name)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("config %s: this user may not read it (%v); let the user the service runs as read it, "+
			"or give another file", name, err)
	}
	return fmt.Errorf("config %s: cannot read it: %w", name, err)
}

// checkPublicURL accepts an absolute http(s) URL without query, fragment or characters that would break
// a Slack link (| < >).
func checkPublicURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("%q is not an absolute http(s) URL such as https://companion.example.com", s)
	case u.RawQuery != "" || u.Fragment != "" || strings.ContainsAny(s, "|<> "):
		return fmt.Errorf("%q must be a plain base URL: no query, fragment, spaces or | < >", s)
	}
	return nil
}

// problemLine is the line a problem names ("line 7: …"), or a line after every other when it names none.
func problemLine(problem string) int {
	if m := problemAt.FindStringSubmatch(problem); m != nil {
		if n, err := strconv.Atoi(m[1]); err == nil {
			return n
		}
	}
	return math.MaxInt32
}

var (
	problemAt    = regexp.MustCompile(`^line (\d+):`)
	unknownField = regexp.MustCompile(`^line (\d+): field (\S+) not found in type \S+$`)
	wrongKind    = regexp.MustCompile("^line (\\d+): cannot unmarshal !!(\\w+) (?:`[^`]*` )?into (\\S+)$")
)

// yamlProblems rewrites the YAML decoder's messages in the file's terms ("line 7:
// destinations.billing.dedup: unknown field (did you mean dedupe?)") instead of Go's. root is the
// file's node tree, in which an unknown field's path is found.
func yamlProblems(err error, root *yaml.Node, text []byte) []string {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return []string{syntaxProblem(strings.TrimPrefix(err.Error(), "yaml: "), text)}
	}
	kinds := map[string]string{"seq": "a list", "map": "a mapping", "str": "text", "int": "a number", "bool": "true or false"}
	out := make([]string, len(te.Errors))
	for i, e := range te.Errors {
		if m := unknownField.FindStringSubmatch(e); m != nil {
			line, _ := strconv.Atoi(m[1])
			e = fmt.Sprintf("line %s: %s", m[1], unknownFieldProblem(root, line, m[2]))
		} else if m := wrongKind.FindStringSubmatch(e); m != nil {
			want := "a mapping of names to settings"
			if strings.HasPrefix(m[3], "[]") {
				want = "a list"
			}
			got := kinds[m[2]]
			if got == "" {
				got = m[2]
			}
			e = fmt.Sprintf("line %s: expected %s, not %s", m[1], want, got)
		}
		out[i] = e
	}
	return out
}

// syntaxProblem adds, to a YAML parser's message, the likely cause in a person's terms: the parser
// names what it met ("found character that cannot start any token"), not what the writer did.
func syntaxProblem(problem string, text []byte) string {
	lines := strings.Split(string(text), "\n")
	tabAt := 0
	if n := problemLine(problem); n != math.MaxInt32 {
		for i := min(n, len(lines)); i >= 1 && i >= n-2; i-- { // the parser may name a line after the tab's
			if l := lines[i-1]; strings.Contains(l[:len(l)-len(strings.TrimLeft(l, " \t"))], "\t") {
				tabAt = i
				break
			}
		}
	}
	switch {
	case tabAt > 0:
		return fmt.Sprintf("%s (line %d holds a tab: YAML indents with spaces only)", problem, tabAt)
	case strings.Contains(problem, "mapping values are not allowed"):
		return problem + " (check this line's indentation against the lines above it; a value that holds \": \" needs quotes)"
	case strings.Contains(problem, "did not find expected key"), strings.Contains(problem, "did not find expected '-'"):
		// The parser names the line where the block it could not finish began, often lines above the
		// one that broke it: name that one.
		if n, indent := misindented(lines, problemLine(problem)); n > 0 {
			spaces := fmt.Sprintf("%d spaces", indent)
			if indent == 1 {
				spaces = "1 space"
			}
			return fmt.Sprintf("%s (line %d is indented by %s, which matches no level above it: indent it as the other lines of its level)", problem, n, spaces)
		}
		return problem + " (check the indentation of this line and the lines below it)"
	case strings.Contains(problem, "found unexpected end of stream"):
		return problem + " (a quote opened and never closed?)"
	}
	return problem
}

// misindented returns the first line from line from on (1-based) that steps back to an indentation no
// open block above it has, and that indentation: "  dedupe: key" followed by " destinations:", whose
// one space is neither the mapping's two nor the top level's none. A list item ("- name: a") opens the
// level of its mapping's keys, two columns in. Blank lines and comments are skipped. 0 when none does.
func misindented(lines []string, from int) (int, int) {
	var open []int // the indentations of the blocks open at this line, innermost last
	for i, l := range lines {
		text := strings.TrimLeft(l, " ")
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		indent := len(l) - len(text)
		closed := false
		for len(open) > 0 && open[len(open)-1] > indent {
			open, closed = open[:len(open)-1], true
		}
		if len(open) == 0 || open[len(open)-1] < indent {
			if closed && i+1 >= from {
				return i + 1, indent
			}
			open = append(open, indent)
		}
		if strings.HasPrefix(text, "- ") {
			open = append(open, indent+2)
		}
	}
	return 0, 0
}

// unknownFieldProblem says where the unknown field name on line is ("destinations.billing.max_attempt")
// and which known field it probably meant, or, when none is close, which fields are known there.
func unknownFieldProblem(root *yaml.Node, line int, name string) string {
	path, known := findUnknown(root, reflect.TypeFor[fileConfig](), "", line, name)
	if known == nil {
		return "unknown field " + name
	}
	if guess := nearest(name, known); guess != "" {
		return fmt.Sprintf("%s: unknown field (did you mean %s?)", path, guess)
	}
	return fmt.Sprintf("%s: unknown field (known here: %s)", path, strings.Join(known, ", "))
}

// findUnknown walks the node tree n alongside the configuration type t to the mapping key name on line
// that t does not declare, and returns its dotted path and the fields t declares there.
func findUnknown(n *yaml.Node, t reflect.Type, path string, line int, name string) (string, []string) {
	switch {
	case n == nil:
		return "", nil
	case n.Kind == yaml.DocumentNode && len(n.Content) > 0:
		return findUnknown(n.Content[0], t, path, line, name)
	case n.Kind == yaml.SequenceNode && t.Kind() == reflect.Slice:
		for i, c := range n.Content {
			if p, known := findUnknown(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i), line, name); known != nil {
				return p, known
			}
		}
	case n.Kind == yaml.MappingNode && (t.Kind() == reflect.Struct || t.Kind() == reflect.Map):
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, value := n.Content[i], n.Content[i+1]
			at := strings.TrimPrefix(path+"."+key.Value, ".")
			if t.Kind() == reflect.Map {
				if p, known := findUnknown(value, t.Elem(), at, line, name); known != nil {
					return p, known
				}
				continue
			}
			var fields []string
			var match reflect.Type
			for f := range t.Fields() {
				if tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); tag != "" && tag != "-" && tag != "secret" {
					fields = append(fields, tag)
					if tag == key.Value {
						match = f.Type
					}
				}
			}
			if match == nil && key.Line == line && key.Value == name {
				return at, fields
			}
			if match != nil {
				if p, known := findUnknown(value, match, at, line, name); known != nil {
					return p, known
				}
			}
		}
	}
	return "", nil
}

// nearest returns the known field name closest to name by edit distance, if it is close enough to be a
// typo of it (at most a third of its letters differ, and at least one may), or "".
func nearest(name string, known []string) string { return typo.Nearest(name, known, typo.Within(name)) }

// check adds the type problem of a field, if any, and reports whether the field holds a usable value.
func check[T any](f field[T], name string, probs *configProblems) bool {
	if f.bad != "" {
		probs.add(f.Line, name, f.bad)
		return false
	}
	return f.Set
}

func (dc destinationConfig) destination(where string, probs *configProblems) items.Destination {
	var d items.Destination
	if check(dc.Dedupe, where+".dedupe", probs) {
		if v := items.Dedupe(dc.Dedupe.Value); v.Valid() {
			d.Dedupe = v
		} else {
			probs.add(dc.Dedupe.Line, where+".dedupe", fmt.Sprintf("%q is not one of key, lookup, none", dc.Dedupe.Value))
		}
	}
	ints := []struct {
		f        field[int]
		name     string
		min, max int
		dst      *int
	}{
		{dc.MaxAttempts, "max_attempts", 1, 1000, &d.MaxAttempts},
		{dc.LeaseSeconds, "lease_seconds", items.MinLeaseSeconds, items.MaxLeaseSeconds, &d.LeaseSeconds},
		{dc.KeyRetentionSeconds, "key_retention_seconds", 1, 10 * 365 * 86400, &d.KeyRetentionSeconds},
	}
	for _, in := range ints {
		if !check(in.f, where+"."+in.name, probs) {
			continue
		}
		if in.f.Value < in.min || in.f.Value > in.max {
			probs.add(in.f.Line, where+"."+in.name, fmt.Sprintf("must be %d-%d, not %d", in.min, in.max, in.f.Value))
			continue
		}
		*in.dst = in.f.Value
	}
	if check(dc.ServerErrorsNotCommitted, where+".server_errors_not_committed", probs) {
		d.ServerErrorsNotCommitted = dc.ServerErrorsNotCommitted.Value
	}
	for _, s := range []struct {
		f    field[string]
		name string
		dst  *string
	}{{dc.Owner, "owner", &d.Owner}, {dc.EscalateTo, "escalate_to", &d.EscalateTo}, {dc.CheckHint, "check_hint", &d.CheckHint}} {
		if check(s.f, where+"."+s.name, probs) {
			*s.dst = s.f.Value
		}
	}
	if check(dc.EscalateAfter, where+".escalate_after", probs) {
		if dc.EscalateAfter.Value < 0 {
			probs.add(dc.EscalateAfter.Line, where+".escalate_after", "must not be negative")
		}
		d.EscalateAfter = time.Duration(dc.EscalateAfter.Value)
	}
	if check(dc.Retention, where+".retention", probs) {
		if dc.Retention.Value <= 0 {
			probs.add(dc.Retention.Line, where+".retention", "must be positive")
		}
		d.Retention = time.Duration(dc.Retention.Value)
	}
	d.Tenants = listOf(dc.Tenants, where+".tenants", func(t string) string {
		if !items.ValidKeyPart(t) {
			return "is not a tenant: a tenant " + items.PartRule
		}
		return ""
	}, probs)
	return d
}

func (tc tokenConfig) token(where string, getenv func(string) string, probs *configProblems) (handlers.Token, bool) {
	ok := true
	if tc.Secret.Set {
		probs.add(tc.Secret.Line, where+".secret", "secrets are not written in the config file; name them with secret_env or secret_file")
		ok = false
	}
	line := max(tc.Name.Line, tc.Tenant.Line, tc.Role.Line, tc.SecretEnv.Line, tc.SecretFile.Line)
	t := handlers.Token{}
	for _, s := range []struct {
		f    field[string]
		name string
		dst  *string
	}{{tc.Name, "name", &t.Name}, {tc.Tenant, "tenant", &t.Tenant}, {tc.Role, "role", (*string)(&t.Role)}} {
		switch {
		case check(s.f, where+"."+s.name, probs):
			*s.dst = s.f.Value
		case s.f.bad == "":
			probs.add(line, where+"."+s.name, "is required")
			ok = false
		default:
			ok = false
		}
	}
	if r := handlers.Role(tc.Role.Value); tc.Role.Set && r != handlers.RoleWorkflow && r != handlers.RoleOperator {
		probs.add(tc.Role.Line, where+".role", fmt.Sprintf("%q is not one of workflow, operator", tc.Role.Value))
		ok = false
	}
	env, file := check(tc.SecretEnv, where+".secret_env", probs), check(tc.SecretFile, where+".secret_file", probs)
	switch {
	case env && file:
		probs.add(tc.SecretFile.Line, where+".secret_file", "give secret_env or secret_file, not both")
		return t, false
	case env:
		secret, err := secretFromEnv(tc.SecretEnv.Value, getenv)
		if err != nil {
			probs.add(tc.SecretEnv.Line, where+".secret_env", err.Error())
			return t, false
		}
		t.Secret = secret
	case file:
		secret, err := secretFromFile(tc.SecretFile.Value)
		if err != nil {
			probs.add(tc.SecretFile.Line, where+".secret_file", err.Error())
			return t, false
		}
		t.Secret = secret
	default:
		probs.add(line, where, "needs secret_env or secret_file")
		return t, false
	}
	if !ok {
		return t, false
	}
	if err := handlers.CheckTokens([]handlers.Token{t}); err != nil {
		probs.add(line, where, err.Error())
		return t, false
	}
	return t, true
}

// secretFromEnv reads the secret in the environment variable name, or, when that is unset, in the file
// that name_FILE points to.
func secretFromEnv(name string, getenv func(string) string) (string, error) {
	if v := strings.TrimSpace(getenv(name)); v != "" {
		return v, nil
	}
	if path := getenv(name + "_FILE"); path != "" {
		return secretFromFile(path)
	}
	return "", fmt.Errorf("environment variable %s (or %s_FILE) is not set", name, name)
}

func secretFromFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("cannot read the secret: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("the secret file %s is empty", path)
	}
	return s, nil
}
