package blueprints

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// findMakeModule is the module named name anywhere in flow (routes and error handlers included), or nil.
func findMakeModule(flow []MakeModule, name string) *MakeModule {
	for i := range flow {
		if flow[i].Metadata.Designer.Name == name {
			return &flow[i]
		}
		for _, r := range flow[i].Routes {
			if m := findMakeModule(r.Flow, name); m != nil {
				return m
			}
		}
		if m := findMakeModule(flow[i].OnError, name); m != nil {
			return m
		}
	}
	return nil
}

// The JSON bodies of the Make blueprints are built, never pasted (issue 12): every value that comes
// from a delivery, a destination or an error reaches a body as the bare output of a JSON → Transform to
// JSON module (json:TransformToJSON), which quotes and escapes a text. checkMakeJSONBodies checks every
// JSON body (an HTTP module's jsonStringBodyContent or data, a webhook answer's body, a composed text
// that is JSON) mapping by mapping:
//
//   - inside a JSON string literal only values that cannot hold a quote, a backslash or a newline may
//     stand: a companion answer's key, claim, decision, reason, state or idempotency key (API.md limits
//     them to [A-Za-z0-9._:@+=~-]), the scenario's ids, a number, or a formula that can only give one of
//     its own words (if(…; "unknown"; "failed"));
//   - a bare mapping must be the .json of a json:TransformToJSON module (ifempty(N.json; "null") for a
//     value that may be empty), JSON kept for it by an aggregator or composed from such values, or a
//     number: an HTTP module's statusCode, the parsed Retry-After, a formula giving only numbers;
//   - the body, each mapping replaced by a hostile value of its kind (a text with a quote, a backslash
//     and a newline for a JSON output), is JSON.
func checkMakeJSONBodies(raw []byte) []string {
	var bp struct {
		Flow []anyModule `json:"flow"`
	}
	if err := json.Unmarshal(raw, &bp); err != nil {
		return []string{err.Error()}
	}
	c := &jsonBodyChecker{mods: map[int]anyModule{}}
	var collect func([]anyModule)
	collect = func(flow []anyModule) {
		for _, m := range flow {
			c.mods[m.ID] = m
			for _, r := range m.Routes {
				collect(r.Flow)
			}
			collect(m.OnError)
		}
	}
	collect(bp.Flow)
	for _, id := range slices.Sorted(maps.Keys(c.mods)) {
		m := c.mods[id]
		for _, b := range jsonBodies(m) {
			c.checkBody(m, b.field, b.text)
		}
	}
	return c.errs
}

type jsonBody struct{ field, text string }

// jsonBodies are module m's fields that Make sends or answers as JSON.
func jsonBodies(m anyModule) []jsonBody {
	var mp map[string]any
	_ = json.Unmarshal(m.Mapper, &mp)
	str := func(k string) (string, bool) { s, ok := mp[k].(string); return s, ok }
	var out []jsonBody
	switch {
	case strings.HasPrefix(m.Module, "http:"):
		if s, ok := str("jsonStringBodyContent"); ok && mp["inputMethod"] == "jsonString" {
			out = append(out, jsonBody{"jsonStringBodyContent", s})
		}
		if ct, _ := str("contentType"); strings.Contains(ct, "json") {
			if s, ok := str("data"); ok {
				out = append(out, jsonBody{"data", s})
			}
		}
	case m.Module == "gateway:WebhookRespond":
		if s, ok := str("body"); ok {
			out = append(out, jsonBody{"body", s})
		}
	case m.Module == "util:ComposeTransformer":
		if s, ok := str("value"); ok && isJSONText(s) {
			out = append(out, jsonBody{"value", s})
		}
	}
	return out
}

func isJSONText(s string) bool {
	s = strings.TrimSpace(s)
	return strings.HasPrefix(s, "{") || strings.HasPrefix(s, "[")
}

type jsonBodyChecker struct {
	mods map[int]anyModule
	errs []string
}

// hostileText is what a delivered or answered text may hold: everything that breaks a pasted body.
const hostileText = "Ann \"the boss\" O'Neil \\ C:\\new\nline\ttab"

func (c *jsonBodyChecker) checkBody(m anyModule, field, text string) {
	name, _ := m.Metadata["designer"].(map[string]any)["name"].(string)
	where := fmt.Sprintf("module %d (%s) %s", m.ID, name, field)
	hostile, _ := json.Marshal(hostileText)
	var rendered strings.Builder
	ok := true
	for _, seg := range scanJSONBody(text) {
		if seg.expr == "" {
			rendered.WriteString(seg.text)
			continue
		}
		switch {
		case seg.inString && c.safeInString(seg.expr):
			rendered.WriteString("x")
		case seg.inString:
			ok = false
			c.errs = append(c.errs, fmt.Sprintf("%s: {{%s}} is pasted inside a JSON string, where a quote, a backslash or a newline in the value breaks the body; map the .json of a json:TransformToJSON module bare instead", where, seg.expr))
		case c.jsonValue(seg.expr):
			rendered.Write(hostile)
		case c.number(seg.expr):
			rendered.WriteString("0")
		default:
			ok = false
			c.errs = append(c.errs, fmt.Sprintf("%s: {{%s}} is mapped bare but is neither the .json of a json:TransformToJSON module nor a number", where, seg.expr))
		}
	}
	if ok && !json.Valid([]byte(rendered.String())) {
		c.errs = append(c.errs, fmt.Sprintf("%s: not JSON once mapped with hostile values: %s", where, rendered.String()))
	}
}

// jsonSegment is a run of literal text, or a {{…}} mapping and whether it stands inside a JSON string.
type jsonSegment struct {
	text, expr string
	inString   bool
}

// scanJSONBody splits a JSON text with Make mappings into literal runs and mappings, tracking JSON
// string literals (a formula's own quotes are inside the mapping and do not count).
func scanJSONBody(s string) []jsonSegment {
	var out []jsonSegment
	inStr, esc := false, false
	start := 0
	for i := 0; i < len(s); {
		if strings.HasPrefix(s[i:], "{{") {
			end := strings.Index(s[i+2:], "}}")
			if end >= 0 {
				out = append(out, jsonSegment{text: s[start:i]}, jsonSegment{expr: s[i+2 : i+2+end], inString: inStr})
				i += 2 + end + 2
				start = i
				continue
			}
		}
		switch ch := s[i]; {
		case esc:
			esc = false
		case inStr && ch == '\\':
			esc = true
		case ch == '"':
			inStr = !inStr
		}
		i++
	}
	return append(out, jsonSegment{text: s[start:]})
}

var (
	transformOutRE = regexp.MustCompile(`^(\d+)\.json$|^ifempty\((\d+)\.json; "null"\)$`)
	aggJoinRE      = regexp.MustCompile(`^join\(map\((\d+)\.array; "(\w+)"\); ", "\)$`)
	aggByKeyRE     = regexp.MustCompile(`^first\(map\((\d+)\.array; "(\w+)"; "key"; (\d+)\.key\)\)$`)
	composeOutRE   = regexp.MustCompile(`^(\d+)\.value$`)
	statusCodeRE   = regexp.MustCompile(`^(\d+)\.statusCode$`)
	tokenRE        = regexp.MustCompile(`^(\d+)\.(data\.)?(key|claim|decision|reason|state|idempotency_key)$`)
	mappingOnlyRE  = regexp.MustCompile(`^\{\{(.*)\}\}$`)
	wordLeafRE     = regexp.MustCompile(`^"[A-Za-z0-9 _.,:/-]*"$`)
	numberLeafRE   = regexp.MustCompile(`^-?\d+(\.\d+)?$`)
)

// jsonValue: expr gives JSON of any value, built by Make, not pasted.
func (c *jsonBodyChecker) jsonValue(expr string) bool {
	if m := transformOutRE.FindStringSubmatch(expr); m != nil {
		return c.mods[atoi(m[1]+m[2])].Module == "json:TransformToJSON"
	}
	if m := composeOutRE.FindStringSubmatch(expr); m != nil {
		mod := c.mods[atoi(m[1])]
		var mp map[string]string
		_ = json.Unmarshal(mod.Mapper, &mp)
		return mod.Module == "util:ComposeTransformer" && isJSONText(mp["value"])
	}
	agg := aggJoinRE.FindStringSubmatch(expr)
	if agg == nil {
		agg = aggByKeyRE.FindStringSubmatch(expr)
	}
	if agg != nil {
		mod := c.mods[atoi(agg[1])]
		var mp map[string]string
		_ = json.Unmarshal(mod.Mapper, &mp)
		inner := mappingOnlyRE.FindStringSubmatch(mp[agg[2]])
		return mod.Module == "builtin:BasicAggregator" && inner != nil && c.jsonValue(inner[1])
	}
	return false
}

// number: expr gives a number (or null), never a text.
func (c *jsonBodyChecker) number(expr string) bool {
	if m := statusCodeRE.FindStringSubmatch(expr); m != nil {
		return strings.HasPrefix(c.mods[atoi(m[1])].Module, "http:")
	}
	// The Retry-After parser: an HTTP-date parsed to seconds, any other value cut to its digits, null
	// without the header.
	if strings.Contains(expr, "headers.`retry-after`") && strings.Contains(expr, "parseDate(replace(") && strings.Contains(expr, "; /[^0-9]/g; \"\")") {
		return true
	}
	return closedFormula(expr, numberLeafRE)
}

// safeInString: expr cannot give a quote, a backslash or a newline.
func (c *jsonBodyChecker) safeInString(expr string) bool {
	if expr == "var.scenario.id" || expr == "var.scenario.executionId" || c.number(expr) || closedFormula(expr, wordLeafRE) {
		return true
	}
	m := tokenRE.FindStringSubmatch(expr)
	if m == nil {
		return false
	}
	mod := c.mods[atoi(m[1])]
	if m[2] != "" {
		return c.companionCall(mod)
	}
	// A decision bundle of a batch: a feeder over a companion call's data.items.
	var mp map[string]string
	_ = json.Unmarshal(mod.Mapper, &mp)
	if mod.Module != "builtin:BasicFeeder" {
		return false
	}
	src := regexp.MustCompile(`^\{\{(\d+)\.data\.items\}\}$`).FindStringSubmatch(mp["array"])
	return src != nil && c.companionCall(c.mods[atoi(src[1])])
}

func (c *jsonBodyChecker) companionCall(m anyModule) bool {
	var mp MakeHTTPMapper
	_ = json.Unmarshal(m.Mapper, &mp)
	return m.Module == "http:MakeRequest" && strings.HasPrefix(mp.URL, "{{") && strings.Contains(mp.URL, "."+MakeURLVariable+"}}")
}

// closedFormula: expr is a leaf, or if(condition; a; b) whose a and b are closed formulas: whatever the
// condition, the result is one of the formula's own leaves.
func closedFormula(expr string, leaf *regexp.Regexp) bool {
	expr = strings.TrimSpace(expr)
	if leaf.MatchString(expr) {
		return true
	}
	if !strings.HasPrefix(expr, "if(") || !strings.HasSuffix(expr, ")") {
		return false
	}
	args, ok := formulaArgs(expr[len("if("):])
	return ok && len(args) == 3 && closedFormula(args[1], leaf) && closedFormula(args[2], leaf)
}

// formulaArgs splits "a; b; c)" at the top-level semicolons; ok only when the closing parenthesis
// is the last character (the if( … ) is the whole formula).
func formulaArgs(s string) ([]string, bool) {
	var args []string
	depth, inQ, start := 0, false, 0
	for i := 0; i < len(s); i++ {
		switch ch := s[i]; {
		case ch == '"':
			inQ = !inQ
		case inQ:
		case ch == '(':
			depth++
		case ch == ')' && depth > 0:
			depth--
		case ch == ')':
			return append(args, s[start:i]), i == len(s)-1
		case ch == ';' && depth == 0:
			args = append(args, s[start:i])
			start = i + 1
		}
	}
	return nil, false
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// templateBySlug is the template with that slug.
func templateBySlug(t *testing.T, slug string) Template {
	t.Helper()
	for _, tpl := range Templates() {
		if tpl.Slug == slug {
			return tpl
		}
	}
	t.Fatalf("no template %s", slug)
	return Template{}
}

// mutateMakeBody rewrites the JSON body of the module named name and returns the module's id and the
// body's field name.
func mutateMakeBody(t *testing.T, bp *MakeBlueprint, name string, change func(string) string) (int, string) {
	t.Helper()
	m := findMakeModule(bp.Flow, name)
	if m == nil {
		t.Fatalf("no module %q", name)
	}
	var before, after, field string
	switch mp := m.Mapper.(type) {
	case MakeHTTPMapper:
		before, field = mp.JSONStringBodyContent, "jsonStringBodyContent"
		mp.JSONStringBodyContent = change(before)
		after, m.Mapper = mp.JSONStringBodyContent, mp
	case map[string]any:
		before, field = mp["body"].(string), "body"
		mp["body"] = change(before)
		after = mp["body"].(string)
	case map[string]string:
		before, field = mp["value"], "value"
		mp["value"] = change(before)
		after = mp["value"]
	default:
		t.Fatalf("module %q: no JSON body", name)
	}
	if after == before {
		t.Fatalf("module %q: mutation did not apply to %s", name, before)
	}
	return m.ID, field
}

// Each JSON-body rule fails a blueprint that breaks it, with a message naming the module and the field.
func TestMakeCheckerRejectsPastedJSON(t *testing.T) {
	re := func(pattern, repl string) func(string) string {
		return func(s string) string { return regexp.MustCompile(pattern).ReplaceAllString(s, repl) }
	}
	cases := []struct {
		name, slug, module string
		change             func(bp *MakeBlueprint) func(string) string
		want               string
	}{
		{"a delivered text pasted between quotes", "guarded-write", NodeBeforeWrite,
			func(*MakeBlueprint) func(string) string {
				return re(`"recipient": \{\{\d+\.json\}\}`, `"recipient": "{{1.recipient}}"`)
			}, `{{1.recipient}} is pasted inside a JSON string`},
		{"a delivered number pasted bare", "guarded-write", NodeBeforeWrite,
			func(*MakeBlueprint) func(string) string {
				return re(`"amount": \{\{\d+\.json\}\}`, `"amount": {{1.amount}}`)
			}, `{{1.amount}} is mapped bare but is neither`},
		{"a JSON output quoted again", "lookup-reconcile", NodeBeforeWrite,
			func(*MakeBlueprint) func(string) string {
				return re(`"key": (\{\{\d+\.json\}\})`, `"key": "$1"`)
			}, `is pasted inside a JSON string`},
		{"a webhook answer pasting the external id", "guarded-write", "Answer: written",
			func(bp *MakeBlueprint) func(string) string {
				w := findMakeModule(bp.Flow, NodeWrite).ID
				return re(`\{\{ifempty\(\d+\.json; "null"\)\}\}`, fmt.Sprintf(`"{{%d.data.id}}"`, w))
			}, `.data.id}} is pasted inside a JSON string`},
		{"a composed evidence pasting the external id", "batch-guarded-write", "Evidence",
			func(bp *MakeBlueprint) func(string) string {
				w := findMakeModule(bp.Flow, NodeWrite).ID
				return re(`"external_id": \{\{ifempty\(\d+\.json; "null"\)\}\}`, fmt.Sprintf(`"external_id": "{{%d.data.id}}"`, w))
			}, `.data.id}} is pasted inside a JSON string`},
		{"a formula that can give a data value inside a string", "guarded-write", "After-write: HTTP failure",
			func(bp *MakeBlueprint) func(string) string {
				w := findMakeModule(bp.Flow, NodeWrite).ID
				return re(`"unknown"; "failed"\)`, fmt.Sprintf(`"unknown"; %d.data.error)`, w))
			}, `is pasted inside a JSON string`},
		{"a Retry-After value that is not cut to its digits", "guarded-write", "After-write: HTTP failure",
			func(*MakeBlueprint) func(string) string {
				return re("replace\\((\\d+\\.headers\\.`retry-after`); /\\[\\^0-9\\]/g; \"\"\\)", "$1")
			}, "is mapped bare but is neither"},
		{"the .json of a module that is not Transform to JSON", "lookup-reconcile", "Reconcile: found",
			func(bp *MakeBlueprint) func(string) string {
				l := findMakeModule(bp.Flow, NodeLookup).ID
				return re(`"evidence": \{\{\d+\.json\}\}`, fmt.Sprintf(`"evidence": {{%d.json}}`, l))
			}, `.json}} is mapped bare but is neither`},
		{"an aggregated text joined into the items array", "batch-guarded-write", "Batch before-write",
			func(*MakeBlueprint) func(string) string {
				return re(`map\((\d+)\.array; "value"\)`, `map($1.array; "key")`)
			}, `"key"); ", ")}} is mapped bare but is neither`},
		{"the delivery check's answer naming a field by its value", "guarded-write", "Answer: delivery incomplete",
			func(*MakeBlueprint) func(string) string {
				return re(`" invoice"; ""\)`, `1.invoice; "")`)
			}, `is pasted inside a JSON string`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			bp := RenderMake(templateBySlug(t, tc.slug), DefaultSettings())
			id, field := mutateMakeBody(t, &bp, tc.module, tc.change(&bp))
			raw, err := encode(bp)
			if err != nil {
				t.Fatal(err)
			}
			where := fmt.Sprintf("module %d (%s) %s: ", id, tc.module, field)
			var found bool
			errs := checkMakeBlueprint(raw)
			for _, e := range errs {
				found = found || (strings.HasPrefix(e, where) && strings.Contains(e, tc.want))
			}
			if !found {
				t.Errorf("no error %q…%q; the checker said %q", where, tc.want, errs)
			}
		})
	}
}

// Make's Transform to JSON, as the tests model it: a text with mappings becomes a JSON string, a lone
// mapping of a delivered value keeps its type.
func transformToJSON(t *testing.T, object string, delivery map[string]any) string {
	t.Helper()
	var v any
	if m := regexp.MustCompile(`^\{\{1\.(\w+)\}\}$`).FindStringSubmatch(object); m != nil {
		v = delivery[m[1]]
	} else {
		v = deliveredRE.ReplaceAllStringFunc(object, func(s string) string {
			return fmt.Sprint(delivery[deliveredRE.FindStringSubmatch(s)[1]])
		})
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A delivery whose texts hold quotes, backslashes, newlines and tabs reaches companion and the write
// exactly: the before-write, the trigger claim and the write body are JSON, and each value comes back
// as it was delivered (a number stays a number). Pasted between quotes, as before issue 12, the first
// quote ended the string.
func TestMakeBodiesCarryHostileTextsExactly(t *testing.T) {
	deliveries := map[string]map[string]any{
		"guarded-write":    {"invoice": `74"2\`, "recipient": hostileText, "amount": 120.5, "reminder": 2},
		"lookup-reconcile": {"reference": "QT-\"0417\"\n", "customer": hostileText, "amount": 4200},
	}
	for slug, delivery := range deliveries {
		tpl := templateBySlug(t, slug)
		bp := RenderMake(tpl, DefaultSettings())
		out := map[int]string{}
		var walk func([]MakeModule)
		walk = func(flow []MakeModule) {
			for _, m := range flow {
				if m.Module == "json:TransformToJSON" {
					// Only the delivery's values: every mapping in the object is one of the webhook's fields.
					if obj := m.Mapper.(map[string]string)["object"]; strings.Count(obj, "{{") == len(deliveredRE.FindAllString(obj, -1)) {
						out[m.ID] = transformToJSON(t, obj, delivery)
					}
				}
				for _, r := range m.Routes {
					walk(r.Flow)
				}
				walk(m.OnError)
			}
		}
		walk(bp.Flow)
		render := func(name string) map[string]any {
			m := findMakeModule(bp.Flow, name)
			body := m.Mapper.(MakeHTTPMapper).JSONStringBodyContent
			body = regexp.MustCompile(`\{\{(\d+)\.json\}\}`).ReplaceAllStringFunc(body, func(s string) string {
				j, ok := out[atoi(regexp.MustCompile(`\d+`).FindString(s))]
				if !ok {
					t.Fatalf("%s: %s maps %s, which the test cannot compute", slug, name, s)
				}
				return j
			})
			body = strings.ReplaceAll(body, "{{var.scenario.executionId}}", "77")
			var v map[string]any
			if err := json.Unmarshal([]byte(body), &v); err != nil {
				t.Fatalf("%s: %s: the body is not JSON with a hostile delivery: %v\n%s", slug, name, err, body)
			}
			return v
		}
		text := func(s string) string {
			return deliveredRE.ReplaceAllStringFunc(s, func(s string) string { return fmt.Sprint(delivery[deliveredRE.FindStringSubmatch(s)[1]]) })
		}
		bw := render(NodeBeforeWrite)
		if bw["key"] != text(tpl.Example.KeyMake) || bw["reference"] != text(tpl.Example.RefMake) {
			t.Errorf("%s: key %q reference %q, want %q %q", slug, bw["key"], bw["reference"], text(tpl.Example.KeyMake), text(tpl.Example.RefMake))
		}
		payload, _ := bw["payload"].(map[string]any)
		for field, want := range delivery {
			got := payload[field]
			if n, ok := want.(int); ok {
				want = float64(n)
			}
			if got != want {
				t.Errorf("%s: payload.%s = %#v, want %#v", slug, field, got, want)
			}
		}
		write := render(NodeWrite)
		if write["reference"] != text(tpl.Example.RefMake) || write[deliveryFields(tpl.Example)[1]] != payload[deliveryFields(tpl.Example)[1]] {
			t.Errorf("%s: the write body %v does not carry the delivered values", slug, write)
		}
		if tpl.TriggerGuard {
			if tc := render("Claim trigger event"); tc["key"] != text(tpl.Example.KeyMake)+":trigger" {
				t.Errorf("%s: trigger claim key %q", slug, tc["key"])
			}
		}
	}
}

// Check delivery stops a delivery missing a field the key, the reference or the payload is built from
// (missing, null or empty) before any key is built, and answers 400 naming it; a complete delivery (an
// amount of 0 too) goes on. Before, such a delivery built invoice-:reminder:2, shared by every
// malformed delivery.
func TestMakeCheckDeliveryStopsIncomplete(t *testing.T) {
	presentRE := regexp.MustCompile(`^\{\{length\(toString\(ifempty\(1\.(\w+); ""\)\)\)\}\}$`)
	lacksRE := regexp.MustCompile(`\{\{if\(length\(toString\(ifempty\(1\.(\w+); ""\)\)\) = 0; "( \w+)"; ""\)\}\}`)
	for _, tpl := range Templates() {
		if tpl.N8nOnly || tpl.Shape == Batch {
			continue
		}
		bp := RenderMake(tpl, DefaultSettings())
		check := findMakeModule(bp.Flow, "Check delivery")
		if check == nil || len(check.Routes) != 2 {
			t.Fatalf("%s: no two-route Check delivery router", tpl.Slug)
		}
		if first := check.Routes[0].Flow[0]; first.Metadata.Designer.Name != "JSON: key" {
			t.Errorf("%s: the complete route starts with %q, not the key", tpl.Slug, first.Metadata.Designer.Name)
		}
		length := func(d map[string]any, field string) int {
			v, ok := d[field]
			if !ok || v == nil {
				return 0
			}
			return len(fmt.Sprint(v))
		}
		pass := func(f *MakeFilter, d map[string]any) bool {
			return passesNumberFilter(t, f, func(a string) int {
				m := presentRE.FindStringSubmatch(a)
				if m == nil {
					t.Fatalf("%s: unexpected condition on %s", tpl.Slug, a)
				}
				return length(d, m[1])
			})
		}
		var event map[string]any
		if err := json.Unmarshal([]byte(tpl.Example.Event), &event); err != nil {
			t.Fatal(err)
		}
		goes, refuses := check.Routes[0].Flow[0].Filter, check.Routes[1].Flow[0].Filter
		if !pass(goes, event) || pass(refuses, event) {
			t.Errorf("%s: the example delivery does not go on", tpl.Slug)
		}
		zero := map[string]any{}
		for k, v := range event {
			zero[k] = v
		}
		zero["amount"] = 0
		if !pass(goes, zero) || pass(refuses, zero) {
			t.Errorf("%s: an amount of 0 is taken for a missing field", tpl.Slug)
		}
		answer := check.Routes[1].Flow[0]
		if answer.Module != "gateway:WebhookRespond" || answer.Mapper.(map[string]any)["status"] != "400" {
			t.Fatalf("%s: the refusing route does not answer 400", tpl.Slug)
		}
		for _, field := range deliveryFields(tpl.Example) {
			for _, bad := range []any{nil, "", "absent"} {
				d := map[string]any{}
				for k, v := range event {
					d[k] = v
				}
				if bad == "absent" {
					delete(d, field)
				} else {
					d[field] = bad
				}
				if pass(goes, d) || !pass(refuses, d) {
					t.Errorf("%s: a delivery with %s %v is not refused", tpl.Slug, field, bad)
				}
				body := lacksRE.ReplaceAllStringFunc(answer.Mapper.(map[string]any)["body"].(string), func(s string) string {
					m := lacksRE.FindStringSubmatch(s)
					if length(d, m[1]) == 0 {
						return m[2]
					}
					return ""
				})
				var v struct{ Error, Message string }
				if err := json.Unmarshal([]byte(body), &v); err != nil || v.Error != "missing_fields" || !strings.Contains(v.Message, "lacks: "+field+";") {
					t.Errorf("%s: without %s the answer is %s (%v)", tpl.Slug, field, body, err)
				}
			}
		}
	}
}

// makeFlowOf is the flow (top level, route or error handler) that holds module id.
func makeFlowOf(flow []MakeModule, id int) []MakeModule {
	for _, m := range flow {
		if m.ID == id {
			return flow
		}
		for _, r := range m.Routes {
			if f := makeFlowOf(r.Flow, id); f != nil {
				return f
			}
		}
		if f := makeFlowOf(m.OnError, id); f != nil {
			return f
		}
	}
	return nil
}

// The batch blueprint claims nothing when an item lacks a field its key, reference or payload is built
// from: the batch before-write's filter stops, and the webhook is answered 400 with the fields each item
// lacks, in delivery order. A complete batch goes on.
func TestMakeBatchCheckDelivery(t *testing.T) {
	tpl := templateBySlug(t, "batch-guarded-write")
	bp := RenderMake(tpl, DefaultSettings())
	agg := findMakeModule(bp.Flow, "All items")
	check := findMakeModule(bp.Flow, "Check delivery")
	if agg == nil || check == nil || len(check.Routes) != 2 {
		t.Fatal("no aggregator and two-route Check delivery router")
	}
	// The claim's route starts with the keys of the call (named by the answers to a refused call), which
	// carries the route's filter.
	keys, claim, lacking, answer := check.Routes[0].Flow[0], check.Routes[0].Flow[1], check.Routes[1].Flow[0], check.Routes[1].Flow[1]
	if claim.Metadata.Designer.Name != "Batch before-write" || claim.Filter != nil || lacking.Module != "json:TransformToJSON" || answer.Mapper.(map[string]any)["status"] != "400" {
		t.Fatalf("Check delivery routes: %s, %s / %s, %s", keys.Metadata.Designer.Name, claim.Metadata.Designer.Name, lacking.Module, answer.Metadata.Designer.Name)
	}
	claim = keys
	lacksRE := regexp.MustCompile(`\{\{if\(length\(toString\(ifempty\(\d+\.(\w+); ""\)\)\) = 0; "( \w+)"; ""\)\}\}`)
	missingOf := func(item map[string]any) string {
		return lacksRE.ReplaceAllStringFunc(agg.Mapper.(map[string]string)["missing"], func(s string) string {
			m := lacksRE.FindStringSubmatch(s)
			if v, ok := item[m[1]]; !ok || v == nil || fmt.Sprint(v) == "" {
				return m[2]
			}
			return ""
		})
	}
	pass := func(f *MakeFilter, items []map[string]any) bool {
		var joined string
		for _, it := range items {
			joined += missingOf(it)
		}
		return passesNumberFilter(t, f, func(a string) int {
			switch a {
			case fmt.Sprintf("{{length(%d.array)}}", agg.ID):
				return len(items)
			case fmt.Sprintf(`{{length(join(map(%d.array; "missing"); ""))}}`, agg.ID):
				return len(joined)
			}
			t.Fatalf("unexpected condition on %s", a)
			return 0
		})
	}
	var good map[string]any
	if err := json.Unmarshal([]byte(tpl.Example.Event), &good); err != nil {
		t.Fatal(err)
	}
	noAmount := map[string]any{"invoice": "743", "recipient": "c-20", "reminder": 1}
	emptyInvoice := map[string]any{"invoice": "", "recipient": "c-21", "amount": 3, "reminder": 1}
	for _, tc := range []struct {
		name   string
		items  []map[string]any
		claims bool
		lacks  []string
	}{
		{"complete", []map[string]any{good, good}, true, nil},
		{"an amount missing", []map[string]any{good, noAmount}, false, []string{"", " amount"}},
		{"an empty invoice", []map[string]any{emptyInvoice, good}, false, []string{" invoice", ""}},
		{"no items", nil, false, nil},
	} {
		claims, refuses := pass(claim.Filter, tc.items), pass(lacking.Filter, tc.items)
		if claims != tc.claims || (refuses != (tc.lacks != nil)) {
			t.Errorf("%s: claims %v, answers 400 %v", tc.name, claims, refuses)
		}
		for i, want := range tc.lacks {
			if got := missingOf(tc.items[i]); got != want {
				t.Errorf("%s: item %d lacks %q, want %q", tc.name, i, got, want)
			}
		}
	}
}

// The Make README's and docs/make.md's examples name the modules by their ids in the shipped
// blueprints.
func TestMakeReadmeNamesTheModules(t *testing.T) {
	s := DefaultSettings()
	docs, err := os.ReadFile("../docs/make.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := makeReadme(s) + string(docs)
	batch := RenderMake(templateBySlug(t, "batch-guarded-write"), s)
	single := RenderMake(templateBySlug(t, "guarded-write"), s)
	for _, want := range []string{
		fmt.Sprintf(`first(map(%d.array; \"invoice\"; \"key\"; %d.key))`, findMakeModule(batch.Flow, "All items").ID, findMakeModule(batch.Flow, "One bundle per decision").ID),
		fmt.Sprintf(`\"recipient\": {{%d.json}}`, findMakeModule(single.Flow, "JSON: recipient").ID),
	} {
		want = strings.ReplaceAll(want, `\"`, `"`)
		if n := strings.Count(readme, want); n != 2 {
			t.Errorf("the Make README and docs/make.md show %s %d times, want once each", want, n)
		}
	}
}

// Every field of an example's Make payload is one delivered value the blueprints serialize: a field
// the parser did not recognize would be dropped from the payload without a word.
func TestMakePayloadFieldsAllSerialized(t *testing.T) {
	for _, tpl := range Templates() {
		if tpl.N8nOnly {
			continue
		}
		var payload map[string]any
		if err := json.Unmarshal([]byte(deliveredRE.ReplaceAllString(tpl.Example.PayloadMake, "0")), &payload); err != nil {
			t.Fatalf("%s: %v", tpl.Slug, err)
		}
		_, v := (&makeFlow{}).deliveryJSON(tpl.Example, 1, false, 0, 0)
		if len(v.fields) != len(payload) {
			t.Errorf("%s: %d payload fields serialized, the example has %d", tpl.Slug, len(v.fields), len(payload))
		}
	}
}

// passesNumberFilter evaluates a Make filter made of number comparisons (any OR group whose AND conditions
// all hold), given the number each condition's left side stands for.
func passesNumberFilter(t *testing.T, f *MakeFilter, value func(a string) int) bool {
	t.Helper()
	for _, and := range f.Conditions {
		ok := true
		for _, c := range and {
			n, want := value(c.A), atoi(c.B)
			switch c.O {
			case "number:greater":
				ok = ok && n > want
			case "number:equal":
				ok = ok && n == want
			default:
				t.Fatalf("unexpected operator %s in %+v", c.O, c)
			}
		}
		if ok {
			return true
		}
	}
	return false
}
