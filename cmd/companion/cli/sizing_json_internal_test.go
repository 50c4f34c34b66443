package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
)

// refAnswer and refItems are what encoding/json decodes of the answers the bench reads.
type refAnswer struct {
	Key      string `json:"key"`
	Decision string `json:"decision"`
	Reason   string `json:"reason"`
	Claim    string `json:"claim"`
	Error    *struct {
		Code string `json:"code"`
	} `json:"error"`
}

type refItems struct {
	Items []refAnswer `json:"items"`
}

func (r refAnswer) bench() benchAnswer {
	a := benchAnswer{Key: r.Key, Decision: r.Decision, Reason: r.Reason, Claim: r.Claim}
	if r.Error != nil {
		a.Error = r.Error.Code
	}
	return a
}

// checkDecodeAgrees decodes valid JSON text with the scan and with encoding/json, as one answer and as a
// batch answer, and reports where they differ: both decode it alike, or both refuse it.
func checkDecodeAgrees(t *testing.T, text []byte) {
	t.Helper()
	if !json.Valid(text) {
		t.Fatalf("not JSON: %s", text)
	}
	var ref refAnswer
	refErr := json.Unmarshal(text, &ref)
	got, err := decodeAnswer(text)
	if (err == nil) != (refErr == nil) || (err == nil && got != ref.bench()) {
		t.Errorf("decodeAnswer(%.200s) = %+v, %v; encoding/json %+v, %v", text, got, err, ref.bench(), refErr)
	}
	var refs refItems
	refErr = json.Unmarshal(text, &refs)
	items, err := decodeItems(text, []benchAnswer{{Key: "left from before"}})
	if (err == nil) != (refErr == nil) {
		t.Errorf("decodeItems(%.200s): %v; encoding/json: %v", text, err, refErr)
		return
	}
	if err != nil {
		return
	}
	want := make([]benchAnswer, 0, len(refs.Items))
	for _, r := range refs.Items {
		want = append(want, r.bench())
	}
	if len(items) != len(want) || (len(want) > 0 && !reflect.DeepEqual(items, want)) {
		t.Errorf("decodeItems(%.200s) = %+v; encoding/json %+v", text, items, want)
	}
}

// serviceAnswers runs companion serve and returns its answers to the calls the bench makes and to the
// ones that go wrong, read through the bench's lean client (a batch answer of 500 items comes chunked).
func serviceAnswers(t *testing.T) [][]byte {
	t.Helper()
	m := NewMain()
	m.Stdout, m.Stderr = io.Discard, io.Discard
	env := map[string]string{"COMPANION_ADDR": "127.0.0.1:0", "COMPANION_DATA_DIR": t.TempDir(), "COMPANION_SWEEP_EVERY": "@every 1h"}
	m.Getenv = func(k string) string { return env[k] }
	if err := m.Run(context.Background(), []string{"serve"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	c := newTestConn(t, "http://"+m.Addr(), "")
	var answers [][]byte
	post := func(path, body string, want int) []byte {
		t.Helper()
		status, answer, err := c.post(context.Background(), path, []byte(body))
		if err != nil || status != want {
			t.Fatalf("%s: %d %v; want %d\n%.300s", path, status, err, want, answer)
		}
		answers = append(answers, append([]byte(nil), answer...))
		return answers[len(answers)-1]
	}
	r := &benchRun{o: benchOptions{prefix: "agree"}}
	a, err := decodeAnswer(post("/v1/before-write", string(r.appendItem(nil, 1, 1)), 200))
	if err != nil || a.Decision != "proceed" {
		t.Fatalf("before-write: %+v %v", a, err)
	}
	post("/v1/before-write", string(r.appendItem(nil, 1, 1)), 200)                                                          // skip, in progress
	post("/v1/before-write", `{"key":"agree:i0000001:write:0","payload":{"other":true}}`, 200)                              // conflict
	post("/v1/before-write", `{"key":"agree:\u0065scaped:write:0","payload":{},"reference":"QT <\"7\"> é\\ \u2028&"}`, 200) // escapes
	post("/v1/after-write", string(appendReport(nil, benchAnswer{Key: a.Key, Claim: "c_wrong"})), 409)
	post("/v1/after-write", string(appendReport(nil, a)), 200)
	post("/v1/before-write", `{"key":""}`, 400)
	var batch strings.Builder
	batch.WriteString(`{"batch_id":"agree-b","items":[`)
	for i := range 500 {
		if i > 0 {
			batch.WriteByte(',')
		}
		batch.Write(r.appendItem(nil, 1000+i, 1000))
	}
	batch.WriteString(`]}`)
	items, err := decodeItems(post("/v1/batches/before-write", batch.String(), 200), nil)
	if err != nil || len(items) != 500 {
		t.Fatalf("batch before-write: %d items, %v", len(items), err)
	}
	post("/v1/batches/before-write", batch.String(), 200) // skip, in progress
	report := []byte(`{"items":[`)
	for i, a := range items {
		if i > 0 {
			report = append(report, ',')
		}
		switch i {
		case 7:
			a.Claim = "c_wrong"
		case 499:
			a.Key = "agree:missing:write:0"
		}
		report = appendReport(report, a)
	}
	report = append(report, "]}"...)
	after := post("/v1/batches/after-write", string(report), 200)
	if items, err = decodeItems(after, items); err != nil || len(items) != 500 || items[7].Error == "" || items[499].Error == "" || items[8].Error != "" {
		t.Fatalf("batch after-write: %v, the answer:\n%.600s", err, after)
	}
	post("/v1/batches/after-write", `{"items":[]}`, 400)
	return answers
}

// TestBenchDecodeAgreesWithEncodingJSON holds the bench's scan of answers to encoding/json: on the
// service's real answers (single, batch, conflicts, errors inline and as the whole answer, escapes) and
// on JSON that writes the same fields otherwise.
func TestBenchDecodeAgreesWithEncodingJSON(t *testing.T) {
	for _, text := range serviceAnswers(t) {
		checkDecodeAgrees(t, text)
	}
	for _, text := range benchDecodeCases {
		checkDecodeAgrees(t, []byte(text))
	}
	// It does not validate what it steps over, but it refuses answers whose structure is broken, and
	// what it reads when it is broken: an item's fields for decodeAnswer, the items for decodeItems.
	for _, text := range benchDecodeBroken {
		if a, err := decodeAnswer([]byte(text)); err == nil && !strings.Contains(text, "items") {
			t.Errorf("decodeAnswer(%s) = %+v, no error", text, a)
		}
		if items, err := decodeItems([]byte(text), nil); err == nil && !strings.Contains(text, "key") {
			t.Errorf("decodeItems(%s) = %+v, no error", text, items)
		}
	}
}

var benchDecodeCases = []string{
	`{}`, `null`, `[]`, `""`, `{"key":null,"claim":"c"}`, ` { "KEY" : "k" , "Decision":"proceed" } `,
	`{"key":"a","key":"b"}`, `{"key":"\u0041\"\\\/\b\f\n\r\t","claim":"\ud83d\ude00"}`, `{"\u006bey":"escaped name"}`,
	`{"key":1}`, `{"key":"k","n":-1.5e+3,"t":true,"f":false,"z":null,"o":{"key":"inner","a":[1,{"b":"]}"}]},"s":"\"}"}`,
	`{"items":null}`, `{"items":[]}`, `{"items":[null,{"key":"k"}]}`, `{"items":{"key":"k"}}`,
	`{"counts":{"proceed":2},"items":[{"key":"a","decision":"proceed","claim":"c1","batch_index":0},{"key":"b","error":{"code":"not_found","message":"m"}}],"batch_id":"x"}`,
	`{"items":[{"claim":"c"},{"key":"gone"}],"items":[{"key":"last"}]}`, `{"error":"a string"}`,
	`{"error":{"code":"c"},"error":{"message":"m"}}`, `{"error":{"code":"c"},"error":null}`, "{\"key\":\"\xffbad UTF-8\"}",
	"{\"\u212aey\":\"kelvin\",\"Error\":{\"CODE\":\"c\"},\"cl\u0061im\":\"escaped\"}",
}

var benchDecodeBroken = []string{
	``, `{"a":"k"} x`, `{"a":"k"`, `{"a" "k"}`, `{"a":"k",}`, `{"a":"unterminated}`, `{"a":[1,2}`, `{"a":}`,
	`{"items":[{"claim":"k"},]}`, `{"items":[{"claim":"k"}}`, `{"items":[{"claim":"\u12"}]}`, `{"key":"\u12"}`, `{"key":1}`,
}

// FuzzBenchDecode: on any text encoding/json decodes, the scan decodes the same; on the rest it does
// not panic. go test ./cmd/companion/cli -run '^$' -fuzz FuzzBenchDecode -fuzztime 30s
func FuzzBenchDecode(f *testing.F) {
	for _, text := range append(benchDecodeCases, benchDecodeBroken...) {
		f.Add([]byte(text))
	}
	f.Add([]byte(fmt.Sprintf(`{"items":[{"key":"k","decision":"proceed","reason":"new","claim":"c","error":{"code":"x","n":[%d]}}]}`, 1)))
	f.Fuzz(func(t *testing.T, text []byte) {
		_, _ = decodeAnswer(text)
		_, _ = decodeItems(text, nil)
		if json.Valid(text) {
			checkDecodeAgrees(t, text)
		}
	})
}
