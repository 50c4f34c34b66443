package blueprints

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// makeEval evaluates the part of Make's formula language the blueprints' answers use, so that a test
// can run a status or a count the way Make would: numbers, "texts", mappings (N.path, looked up in
// vals), the operators = != < > <= >= + - and ( ) groups, and the functions if, ifempty, length, map (with its
// filter arguments), contains, min, get, join, merge, replace (also with a /regular expression/g) and toString;
// of an if( only the branch taken is evaluated. A text with {{…}} mappings is evaluated mapping by mapping.
// Anything else fails the test: a formula the evaluator does not know is not checked silently.
func makeEval(t *testing.T, text string, vals map[string]any) any {
	t.Helper()
	if strings.HasPrefix(text, "{{") && strings.HasSuffix(text, "}}") && strings.Count(text, "{{") == 1 {
		return (&makeParser{t: t, s: text[2 : len(text)-2], vals: vals}).whole()
	}
	var out strings.Builder
	for {
		i := strings.Index(text, "{{")
		if i < 0 {
			out.WriteString(text)
			return out.String()
		}
		j := strings.Index(text[i:], "}}")
		if j < 0 {
			t.Fatalf("unclosed mapping in %q", text)
		}
		out.WriteString(text[:i])
		out.WriteString(fmt.Sprint((&makeParser{t: t, s: text[i+2 : i+j], vals: vals}).whole()))
		text = text[i+j+2:]
	}
}

type makeParser struct {
	t    *testing.T
	s    string
	pos  int
	vals map[string]any
	skip int // inside a branch if( does not take: parsed, not evaluated
}

func (p *makeParser) branch(taken bool) any {
	if !taken {
		p.skip++
		defer func() { p.skip-- }()
	}
	return p.expr()
}

func (p *makeParser) whole() any {
	v := p.expr()
	p.space()
	if p.pos != len(p.s) {
		p.t.Fatalf("formula %q: unexpected %q", p.s, p.s[p.pos:])
	}
	return v
}

func (p *makeParser) space() {
	for p.pos < len(p.s) && p.s[p.pos] == ' ' {
		p.pos++
	}
}

func (p *makeParser) eat(tok string) bool {
	p.space()
	if strings.HasPrefix(p.s[p.pos:], tok) {
		p.pos += len(tok)
		return true
	}
	return false
}

// expr is a comparison of sums.
func (p *makeParser) expr() any {
	a := p.sum()
	for _, op := range []string{"!=", "<=", ">=", "=", "<", ">"} {
		if p.eat(op) {
			b := p.sum()
			if p.skip > 0 {
				return nil
			}
			switch op {
			case "=":
				return fmt.Sprint(a) == fmt.Sprint(b)
			case "!=":
				return fmt.Sprint(a) != fmt.Sprint(b)
			}
			x, y := p.num(a), p.num(b)
			return map[string]bool{"<": x < y, ">": x > y, "<=": x <= y, ">=": x >= y}[op]
		}
	}
	return a
}

func (p *makeParser) sum() any {
	a := p.term()
	for {
		switch {
		case p.eat("+"):
			b := p.term()
			if p.skip == 0 {
				a = p.num(a) + p.num(b)
			}
		case p.eat("-"):
			b := p.term()
			if p.skip == 0 {
				a = p.num(a) - p.num(b)
			}
		default:
			return a
		}
	}
}

func (p *makeParser) num(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case int:
		return float64(x)
	case string:
		f, err := strconv.ParseFloat(x, 64)
		if err == nil {
			return f
		}
	}
	p.t.Fatalf("formula %q: %v is not a number", p.s, v)
	return 0
}

func (p *makeParser) term() any {
	p.space()
	if p.eat(`"`) {
		end := strings.IndexByte(p.s[p.pos:], '"')
		v := p.s[p.pos : p.pos+end]
		p.pos += end + 1
		return v
	}
	if p.eat("(") { // a group
		v := p.expr()
		if !p.eat(")") {
			p.t.Fatalf("formula %q: ( without its )", p.s)
		}
		return v
	}
	start := p.pos
	for p.pos < len(p.s) && strings.IndexByte(" ;()=<>!+\"", p.s[p.pos]) < 0 {
		p.pos++
	}
	word := p.s[start:p.pos]
	if word == "" {
		p.t.Fatalf("formula %q: nothing at %d", p.s, start)
	}
	if p.eat("(") {
		if word == "if" {
			// Only the branch the condition picks is evaluated (the other is parsed, as Make does).
			cond, _ := p.expr().(bool)
			p.eat(";")
			a := p.branch(cond)
			p.eat(";")
			b := p.branch(!cond)
			if !p.eat(")") {
				p.t.Fatalf("formula %q: if( without its )", p.s)
			}
			if cond {
				return a
			}
			return b
		}
		var args []any
		for !p.eat(")") {
			args = append(args, p.expr())
			p.eat(";")
		}
		if p.skip > 0 {
			return nil
		}
		return p.call(word, args)
	}
	if strings.HasPrefix(word, "/") {
		return regexp.MustCompile(word[1:strings.LastIndexByte(word, '/')])
	}
	if f, err := strconv.ParseFloat(word, 64); err == nil {
		return f
	}
	v, ok := p.vals[word]
	if !ok {
		return "" // a value Make does not have is empty
	}
	return v
}

func empty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case []any:
		return len(x) == 0
	}
	return false
}

func (p *makeParser) call(name string, args []any) any {
	switch name {
	case "if":
		if b, ok := args[0].(bool); ok && b {
			return args[1]
		}
		return args[2]
	case "ifempty":
		if empty(args[0]) {
			return args[1]
		}
		return args[0]
	case "length":
		switch x := args[0].(type) {
		case []any:
			return float64(len(x))
		case string:
			return float64(len(x))
		}
	case "map":
		arr, _ := args[0].([]any)
		out := []any{}
		for _, e := range arr {
			m, _ := e.(map[string]any)
			if len(args) >= 4 && fmt.Sprint(m[fmt.Sprint(args[2])]) != fmt.Sprint(args[3]) {
				continue
			}
			if v, ok := m[fmt.Sprint(args[1])]; ok && v != nil {
				out = append(out, v)
			}
		}
		return out
	case "replace":
		if re, ok := args[1].(*regexp.Regexp); ok {
			return re.ReplaceAllString(fmt.Sprint(args[0]), fmt.Sprint(args[2]))
		}
		return strings.ReplaceAll(fmt.Sprint(args[0]), fmt.Sprint(args[1]), fmt.Sprint(args[2]))
	case "merge":
		out := []any{}
		for _, a := range args {
			arr, _ := a.([]any)
			out = append(out, arr...)
		}
		return out
	case "toString":
		return fmt.Sprint(args[0])
	case "join":
		arr, _ := args[0].([]any)
		parts := make([]string, len(arr))
		for i, e := range arr {
			parts[i] = fmt.Sprint(e)
		}
		return strings.Join(parts, fmt.Sprint(args[1]))
	case "get":
		if arr, ok := args[0].([]any); ok {
			if i := int(p.num(args[1])); i >= 1 && i <= len(arr) {
				return arr[i-1]
			}
		}
		return ""
	case "contains":
		if arr, ok := args[0].([]any); ok {
			for _, e := range arr {
				if fmt.Sprint(e) == fmt.Sprint(args[1]) {
					return true
				}
			}
			return false
		}
		return strings.Contains(fmt.Sprint(args[0]), fmt.Sprint(args[1]))
	case "min":
		var nums []float64
		for _, a := range args {
			if arr, ok := a.([]any); ok {
				for _, e := range arr {
					nums = append(nums, p.num(e))
				}
			} else if !empty(a) {
				nums = append(nums, p.num(a))
			}
		}
		if len(nums) == 0 {
			return ""
		}
		m := nums[0]
		for _, n := range nums[1:] {
			m = min(m, n)
		}
		return m
	}
	p.t.Fatalf("formula %q: the evaluator does not know %s(%v)", p.s, name, args)
	return nil
}

func TestMakeEvalKnowsTheFormulas(t *testing.T) {
	items := []any{map[string]any{"key": "a", "decision": "skip"}, map[string]any{"key": "b", "decision": "proceed"}, map[string]any{"key": "c", "decision": "skip"}}
	vals := map[string]any{"7.statusCode": 413.0, "3.data.items": items}
	for expr, want := range map[string]string{
		`{{if(7.statusCode = 400; 400; if(7.statusCode = 413; 413; 500))}}`:       "413",
		`{{length(map(3.data.items; "key"; "decision"; "skip")) - 1 + 10}}`:       "11",
		`{{ifempty(9.data.error.code; "companion_error")}}`:                       "companion_error",
		`{{min(ifempty(min(map(3.data.items; "retry_after")); 60); 30)}}`:         "30",
		`{{if(contains(map(3.data.items; "decision"); "proceed"); "yes"; "no")}}`: "yes",
		`HTTP {{7.statusCode}} for {{map(3.data.items; "key")}}`:                  "HTTP 413 for [a b c]",
	} {
		if got := fmt.Sprint(makeEval(t, expr, vals)); got != want {
			t.Errorf("%s = %s, want %s", expr, got, want)
		}
	}
}

// makeRun is what a simulated run of a flow reached: the webhook answers in order (status, Retry-After,
// body as JSON) and the HTTP modules it reached, where the simulation stops (their outcome is the
// network's).
type makeRun struct {
	answers []makeAnswer
	reached []string
}

type makeAnswer struct {
	name, status, retryAfter string
	body                     map[string]any
}

// simulateMake runs flow the way Make runs one bundle through it: a module whose filter fails ends its
// flow, a router runs every route in order, a json:TransformToJSON module sets N.json, a Webhook
// response is evaluated with everything set so far; HTTP modules as said below. vals holds the mappings
// the run starts with (N.path → value: the delivery, the answers of the HTTP modules).
func simulateMake(t *testing.T, flow []MakeModule, vals map[string]any) makeRun {
	t.Helper()
	var run makeRun
	var walk func(flow []MakeModule, vals map[string]any)
	walk = func(flow []MakeModule, vals map[string]any) {
		vals = maps.Clone(vals)
		for _, m := range flow {
			if !makeFilterPasses(t, m.Filter, vals) {
				return
			}
			switch m.Module {
			case "builtin:BasicRouter":
				for _, r := range m.Routes {
					walk(r.Flow, vals)
				}
				return
			case "json:TransformToJSON":
				b, err := json.Marshal(makeEval(t, m.Mapper.(map[string]string)["object"], vals))
				if err != nil {
					t.Fatal(err)
				}
				vals[fmt.Sprintf("%d.json", m.ID)] = string(b)
			case "gateway:WebhookRespond":
				mp := m.Mapper.(map[string]any)
				a := makeAnswer{name: m.Metadata.Designer.Name, status: fmt.Sprint(makeEval(t, mp["status"].(string), vals))}
				for _, h := range mp["headers"].([]map[string]string) {
					if h["key"] == "retry-after" {
						a.retryAfter = fmt.Sprint(makeEval(t, h["value"], vals))
					}
				}
				body := fmt.Sprint(makeEval(t, mp["body"].(string), vals))
				if err := json.Unmarshal([]byte(body), &a.body); err != nil {
					t.Fatalf("%s answers a body that is not JSON: %s", a.name, body)
				}
				run.answers = append(run.answers, a)
			case "http:MakeRequest":
				// A module whose error is in vals runs its error handler and ends the flow; one whose status is
				// in vals answered it and the run goes on; a companion report (after-write, reconcile) is taken
				// as recorded. Any other (a claim, the write, the lookup) ends the simulation: what follows
				// depends on its answer.
				run.reached = append(run.reached, m.Metadata.Designer.Name)
				if _, failed := vals[fmt.Sprintf("%d.error.type", m.ID)]; failed {
					walk(m.OnError, vals)
					return
				}
				url := m.Mapper.(MakeHTTPMapper).URL
				_, answered := vals[fmt.Sprintf("%d.statusCode", m.ID)]
				if !answered && (!strings.Contains(url, MakeURLVariable) || strings.HasSuffix(url, PathBeforeWrite) || strings.HasSuffix(url, PathBatchBeforeWrite)) {
					return
				}
			}
		}
	}
	walk(flow, vals)
	return run
}

// makeFilterPasses evaluates a filter: any OR-group whose AND-conditions all hold.
func makeFilterPasses(t *testing.T, f *MakeFilter, vals map[string]any) bool {
	t.Helper()
	if f == nil {
		return true
	}
	for _, and := range f.Conditions {
		ok := true
		for _, c := range and {
			a, b := fmt.Sprint(makeEval(t, c.A, vals)), c.B
			num := func() (float64, float64, bool) {
				x, err1 := strconv.ParseFloat(a, 64)
				y, err2 := strconv.ParseFloat(b, 64)
				return x, y, err1 == nil && err2 == nil
			}
			x, y, isNum := num()
			switch c.O {
			case "text:equal":
				ok = ok && a == b
			case "text:notequal":
				ok = ok && a != b
			case "number:equal":
				ok = ok && isNum && x == y
			case "number:notequal":
				ok = ok && (!isNum || x != y)
			case "number:greater":
				ok = ok && isNum && x > y
			case "number:less":
				ok = ok && isNum && x < y
			case "number:greaterorequal":
				ok = ok && isNum && x >= y
			default:
				t.Fatalf("the simulation does not know the operator %s", c.O)
			}
		}
		if ok {
			return true
		}
	}
	return false
}
