package blueprints

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
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
	ids := make([]int, 0, len(c.mods))
	for id := range c.mods {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, id := range ids {
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
	// The Retry-After parser (checked elsewhere to parse): whole seconds, or null without the header.
	if strings.Contains(expr, "headers.`retry-after`") && strings.Contains(expr, "parseDate(replace(") {
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
