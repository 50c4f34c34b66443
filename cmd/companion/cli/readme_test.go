package cli_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// readmeBlock is one fenced block of README.md.
type readmeBlock struct {
	lang string
	line int
	text string
}

// readmeBlocks returns the fenced blocks of a Markdown file in order, those indented in a list item too
// (their lines without the fence's indent).
func readmeBlocks(t *testing.T, path string) []readmeBlock {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []readmeBlock
	var cur *readmeBlock
	indent := ""
	for i, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur = &readmeBlock{lang: strings.TrimPrefix(trimmed, "```"), line: i + 1}
			indent = line[:len(line)-len(trimmed)]
		case cur != nil && strings.TrimSpace(line) == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += strings.TrimPrefix(line, indent) + "\n"
		}
	}
	return out
}

// shellCommands splits shell text into commands of words, as sh would for the quoting the README uses:
// single and double quotes, a backslash before a newline, comments, commands one a line or after a ;.
func shellCommands(t *testing.T, text string) [][]string {
	t.Helper()
	var cmds [][]string
	var words []string
	var word strings.Builder
	inWord := false
	endWord := func() {
		if inWord {
			words = append(words, word.String())
			word.Reset()
			inWord = false
		}
	}
	endCommand := func() {
		endWord()
		if len(words) > 0 {
			cmds = append(cmds, words)
			words = nil
		}
	}
	for i := 0; i < len(text); i++ {
		switch ch := text[i]; {
		case ch == '\'':
			end := strings.IndexByte(text[i+1:], '\'')
			if end < 0 {
				t.Fatalf("unterminated ' in %q", text)
			}
			word.WriteString(text[i+1 : i+1+end])
			inWord = true
			i += end + 1
		case ch == '"':
			end := strings.IndexByte(text[i+1:], '"')
			if end < 0 {
				t.Fatalf("unterminated \" in %q", text)
			}
			word.WriteString(text[i+1 : i+1+end])
			inWord = true
			i += end + 1
		case ch == '\\' && i+1 < len(text) && text[i+1] == '\n':
			i++
			endWord()
		case ch == '#' && !inWord:
			for i < len(text) && text[i] != '\n' {
				i++
			}
			endCommand()
		case ch == '\n' || ch == ';':
			endCommand()
		case ch == ' ' || ch == '\t':
			endWord()
		default:
			word.WriteByte(ch)
			inWord = true
		}
	}
	endCommand()
	return cmds
}

// curlRequest is what one curl command of the README asks.
type curlRequest struct {
	method, url, body string
	header            http.Header
}

func parseCurl(t *testing.T, words []string) curlRequest {
	t.Helper()
	r := curlRequest{header: http.Header{}}
	for i := 1; i < len(words); i++ {
		w := words[i]
		next := func() string {
			if i+1 >= len(words) {
				t.Fatalf("curl %s without a value: %q", w, words)
			}
			i++
			return words[i]
		}
		switch {
		case w == "-s" || w == "--silent":
		case w == "-H" || w == "--header":
			name, value, ok := strings.Cut(next(), ":")
			if !ok {
				t.Fatalf("curl header %q", words[i])
			}
			r.header.Set(strings.TrimSpace(name), strings.TrimSpace(value))
		case w == "-d" || w == "--data":
			r.body = next()
		case w == "-X" || w == "--request":
			r.method = next()
		case strings.HasPrefix(w, "-"):
			t.Fatalf("the README's curl uses %s, which this test does not know: teach it, or write the step without it", w)
		case r.url != "":
			t.Fatalf("curl with two URLs: %q", words)
		default:
			r.url = w
		}
	}
	if r.method == "" {
		r.method = http.MethodGet
		if r.body != "" {
			r.method = http.MethodPost
		}
	}
	return r
}

// generated are the answer fields whose values each ledger makes up: the README shows an example,
// the test checks the field is there and that a value the README repeats is repeated by the service.
var generated = map[string]bool{"claim": true, "idempotency_key": true, "lease_expires_at": true, "retry_after": true,
	"created_at": true, "updated_at": true, "at": true, "fingerprint": true, "retry_at": true}

// TestREADMEWalkThrough runs every curl of README.md, in order, against a fresh companion serve, and
// checks each answer against the JSON the README shows under it: every field the README shows has that
// value (the generated ones — claims, idempotency keys, times — are there, and stay the same where the
// README repeats one). A claim the README shows is replaced in later requests by the one the service
// gave. A curl without an answer shown must answer 2xx.
func TestREADMEWalkThrough(t *testing.T) {
	p := start(t, map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": t.TempDir()})
	blocks := readmeBlocks(t, "../../../README.md")
	// seen maps a generated value the README shows to the one the service answered.
	seen := map[string]string{}
	// files are the answers a curl saved with | tee FILE; vars the shell variables a line
	// NAME=$(jq -r .FIELD FILE) set from them, which a later body uses as "$NAME".
	files, vars := map[string]map[string]any{}, map[string]string{}
	steps, checked, carried := 0, 0, 0
	for i, b := range blocks {
		if b.lang == "sh" && !strings.Contains(b.text, "curl ") {
			for _, m := range jqLine.FindAllStringSubmatch(b.text, -1) {
				answer, ok := files[m[3]]
				if !ok {
					t.Fatalf("README.md line %d: jq reads %s, which no curl before it wrote (| tee %s)", b.line, m[3], m[3])
				}
				v, ok := answer[m[2]].(string)
				if !ok {
					t.Fatalf("README.md line %d: the answer in %s has no string field %s: %v", b.line, m[3], m[2], answer)
				}
				vars[m[1]] = v
			}
			continue
		}
		if b.lang != "sh" || !strings.Contains(b.text, "curl ") {
			if b.lang == "json" && (i == 0 || !strings.Contains(blocks[i-1].text, "curl ")) {
				t.Errorf("README.md line %d: an answer with no curl before it", b.line)
			}
			continue
		}
		var answer *readmeBlock
		if i+1 < len(blocks) && blocks[i+1].lang == "json" {
			answer = &blocks[i+1]
		}
		cmds := shellCommands(t, b.text)
		if answer != nil && len(cmds) != 1 {
			t.Fatalf("README.md line %d: %d commands before one answer; give each curl its own block", b.line, len(cmds))
		}
		for _, words := range cmds {
			if words[0] != "curl" {
				t.Fatalf("README.md line %d: %q in a block of curls", b.line, words[0])
			}
			steps++
			var tee string
			if p := slices.Index(words, "|"); p >= 0 {
				if len(words) != p+3 || words[p+1] != "tee" {
					t.Fatalf("README.md line %d: a curl piped into %q; the walk-through pipes only into tee FILE", b.line, words[p+1:])
				}
				words, tee = words[:p], words[p+2]
			}
			r := parseCurl(t, words)
			body := r.body
			for shown, got := range seen {
				body = strings.ReplaceAll(body, shown, got)
			}
			for name, v := range vars {
				if strings.Contains(body, "$"+name) {
					body = strings.ReplaceAll(body, "$"+name, v)
					carried++
				}
			}
			if strings.Contains(body, "$") {
				t.Fatalf("README.md line %d: the body names a variable no step before it set: %s", b.line, body)
			}
			target, ok := strings.CutPrefix(r.url, "localhost:8080")
			if !ok {
				t.Fatalf("README.md line %d: URL %q is not on localhost:8080, where companion serve listens", b.line, r.url)
			}
			req, err := http.NewRequest(r.method, "http://"+p.Addr()+target, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header = r.header
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				t.Fatalf("README.md line %d: %s %s answered %d: %s", b.line, r.method, target, resp.StatusCode, got)
			}
			if !strings.HasSuffix(string(got), "}\n") {
				t.Errorf("README.md line %d: the answer does not end with a newline: %q", b.line, got)
			}
			if answer == nil {
				continue
			}
			var want, have map[string]any
			if err := json.Unmarshal([]byte(answer.text), &want); err != nil {
				t.Fatalf("README.md line %d: the answer shown is not JSON: %v", answer.line, err)
			}
			if err := json.Unmarshal(got, &have); err != nil {
				t.Fatalf("README.md line %d: %v: %s", b.line, err, got)
			}
			if tee != "" {
				files[tee] = have
			}
			for _, problem := range compareShown("", want, have, seen) {
				t.Errorf("README.md line %d: %s\nanswer: %s", answer.line, problem, got)
			}
			checked++
		}
	}
	// The walk-through has eight answers and a last look at the item; fewer means the parsing lost some.
	if steps < 9 || checked < 8 || carried < 2 {
		t.Fatalf("ran %d curl(s), checked %d answer(s), carried %d claim(s): the README's walk-through was not found", steps, checked, carried)
	}
}

// jqLine is a line of the walk-through that sets a shell variable from a saved answer:
// CLAIM=$(jq -r .claim answer.json).
var jqLine = regexp.MustCompile(`(?m)^([A-Z_]+)=\$\(jq -r \.([a-z_]+) (\S+)\)`)

// compareShown returns how have differs from what the README shows in want.
func compareShown(prefix string, want, have map[string]any, seen map[string]string) []string {
	var out []string
	for name, w := range want {
		h, ok := have[name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s%s is missing", prefix, name))
		case generated[name]:
			ws, wok := w.(string)
			hs, hok := h.(string)
			if !wok || !hok {
				continue // retry_after is a number
			}
			if before, ok := seen[ws]; ok && before != hs {
				out = append(out, fmt.Sprintf("%s%s is %q where the README repeats an earlier value (%q then)", prefix, name, hs, before))
			}
			if wp, _, _ := strings.Cut(ws, "_"); strings.Contains(ws, "_") && !strings.HasPrefix(hs, wp+"_") {
				out = append(out, fmt.Sprintf("%s%s = %q, not of the shape %q", prefix, name, hs, ws))
			}
			// A time shown with its fraction of a second is answered with one, and the other way round
			// (the service writes times to the nanosecond, RFC 3339).
			if _, err := time.Parse(time.RFC3339Nano, ws); err == nil && strings.Contains(ws, ".") != strings.Contains(hs, ".") {
				out = append(out, fmt.Sprintf("%s%s = %q, written otherwise than the README's %q", prefix, name, hs, ws))
			}
			seen[ws] = hs
		default:
			wm, wIsMap := w.(map[string]any)
			hm, hIsMap := h.(map[string]any)
			if wIsMap && hIsMap {
				out = append(out, compareShown(prefix+name+".", wm, hm, seen)...)
			} else if !reflect.DeepEqual(w, h) {
				out = append(out, fmt.Sprintf("%s%s = %v, the README shows %v", prefix, name, h, w))
			}
		}
	}
	return out
}

// TestDocsAPIExamplesAreJSON: every answer docs/api.md shows is one JSON object, and every error code of
// the one table from codes to statuses is in its table of error codes.
func TestDocsAPIExamplesAreJSON(t *testing.T) {
	n := 0
	for _, b := range readmeBlocks(t, "../../../docs/api.md") {
		if b.lang != "json" {
			continue
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(b.text), &v); err != nil {
			t.Errorf("docs/api.md line %d: %v", b.line, err)
		}
		n++
	}
	if n < 10 {
		t.Errorf("found %d JSON examples in docs/api.md", n)
	}
	doc, err := os.ReadFile("../../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, code := range []string{"invalid_request", "unauthorized", "forbidden", "not_found", "method_not_allowed", "conflict",
		"payload_too_large", "unsupported_media_type", "internal", "store_unavailable", "not_implemented"} {
		if !strings.Contains(string(doc), "| `"+code+"` |") {
			t.Errorf("docs/api.md has no row for the error code %s", code)
		}
	}
}
