package handlers

import (
	"errors"
	"testing"

	"github.com/replaysafe/companion/items"
)

// TestDecodeStrictTrickyBodies covers bodies that look well-formed to the quick scan of member names but
// are not acceptable (a name repeated after a nested value, a name escaped or in another case), and
// acceptable bodies whose nested values hold quotes, brackets and member names of their own.
func TestDecodeStrictTrickyBodies(t *testing.T) {
	const allowed = "unknown field (allowed: key, workflow, object, action, sequence, payload, destination, dedupe, reference, " +
		"batch_id, batch_index, execution_id, owner, lease_seconds)"
	cases := []struct {
		name, body, field, problem string
	}{
		{"repeated after nested", `{"key":"a","payload":{"x":"}\"","y":[1,{"key":2}]},"key":"b"}`, "items[0].key", "appears more than once"},
		{"unknown after nested", `{"payload":{"n":{"zz":1}}, "zz" : 1}`, "items[0].zz", allowed},
		{"repeated with escape", `{"k\u0065y":"a","payload":{},"key":"b"}`, "items[0].key", "appears more than once"},
		{"other case", `{"KEY":"a","payload":{}}`, "items[0].KEY", "unknown field (did you mean key? allowed: key, workflow, object, action, sequence, payload, " +
			"destination, dedupe, reference, batch_id, batch_index, execution_id, owner, lease_seconds)"},
		{"typo", `{"key":"a","paylod":{}}`, "items[0].paylod", "unknown field (did you mean payload? allowed: key, workflow, object, action, sequence, payload, " +
			"destination, dedupe, reference, batch_id, batch_index, execution_id, owner, lease_seconds)"},
		{"after the object", `{"key":"a"} x`, "items[0].body", ""},
		{"wrong type", `{"key":1,"payload":{}}`, "items[0].key", "must be a string"},
		{"not an object", ` null `, "items[0].body", "must be a JSON object"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var r beforeWriteRequest
			_, err := decodeStrict([]byte(tc.body), "items[0].", &r)
			var e *items.Error
			if !errors.As(err, &e) || len(e.Fields) == 0 {
				t.Fatalf("decodeStrict(%s) = %v, want a problem with %s", tc.body, err, tc.field)
			}
			if f := e.Fields[0]; f.Field != tc.field || (tc.problem != "" && f.Problem != tc.problem) {
				t.Errorf("decodeStrict(%s): %s: %s, want %s: %s", tc.body, f.Field, f.Problem, tc.field, tc.problem)
			}
		})
	}

	var r beforeWriteRequest
	body := " {\"workflow\":\"w\",\"object\":\"o\",\"action\":\"a\", \"sequence\" :3,\n\"payload\":{\"s\":\"a\\\"}]\",\"n\":[1.50,{\"key\":null}],\"t\":true},\"destination\":null,\"lease_seconds\":3}\t"
	ps, err := decodeStrict([]byte(body), "", &r)
	if err != nil {
		t.Fatalf("decodeStrict: %v", err)
	}
	if len(ps) != 1 || ps[0].Field != "lease_seconds" || ps[0].Problem != "must be at least 5" {
		t.Errorf("problems = %+v, want lease_seconds: must be at least 5", ps)
	}
	if string(r.Payload) != `{"s":"a\"}]","n":[1.50,{"key":null}],"t":true}` || string(r.Sequence) != "3" || *r.Workflow != "w" || r.Destination != "" {
		t.Errorf("decoded %+v", r)
	}
}

// TestCheckContentType: the common headers, answered without parsing, and the others, parsed.
func TestCheckContentType(t *testing.T) {
	for header, ok := range map[string]bool{
		"application/json": true, "application/json; charset=utf-8": true, "Application/JSON; Charset=UTF8": true,
		"application/problem+json": true, "application/json;charset=latin1": false, "text/plain": false, "": false,
		"application/json; charset=": false, "application/jsonx": false,
	} {
		if got := checkContentType(header); (got == "") != ok {
			t.Errorf("checkContentType(%q) = %q; want accepted %v", header, got, ok)
		}
	}
	if n := testing.AllocsPerRun(100, func() { checkContentType("application/json") }); n != 0 {
		t.Errorf("checkContentType(application/json) allocates %.0f times", n)
	}
}
