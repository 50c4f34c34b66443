package handlers

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/replaysafe/companion/batches"
	"github.com/replaysafe/companion/items"
	"github.com/replaysafe/companion/items/itemstest"
)

// batchCorpus builds n batch bodies of the given kind ("before" for before-write and prepare, "after"
// for after-write) that mix ordinary items with every kind of unusual one: unknown, repeated, escaped
// and differently cased member names, null members, batch_id inside an item, wrong types, values at and
// past their limits, items that are not objects, whitespace everywhere, and unusual top levels.
func batchCorpus(rng *rand.Rand, kind string, n int) []string {
	// In a body meant to be good (about half of them), choose picks one of the first good options only.
	good := false
	pick := func(options ...string) string { return options[rng.IntN(len(options))] }
	choose := func(nGood int, options ...string) string {
		if good {
			return options[rng.IntN(nGood)]
		}
		return pick(options...)
	}
	space := func() string {
		if rng.IntN(4) > 0 {
			return ""
		}
		return pick(" ", "\n", "\t ", "\r\n  ")
	}
	// object writes the members as a JSON object, with whitespace around every token.
	object := func(members [][2]string) string {
		var b strings.Builder
		b.WriteString(space() + "{" + space())
		for i, m := range members {
			if i > 0 {
				b.WriteString("," + space())
			}
			b.WriteString(m[0] + space() + ":" + space() + m[1] + space())
		}
		b.WriteString("}" + space())
		return b.String()
	}
	long := func(r string, n int) string { return `"` + strings.Repeat(r, n) + `"` }
	payload := func() string {
		return choose(6, `{"a":1}`, `{}`, `{"s":"x\"}]","n":[1.50,{"key":null}],"t":true}`, `{"batch_id":"x","items":[1]}`,
			`{"k\u0065y":1, "e":"\u00e9\n"}`, ` { "b" : [ 1 , 2 ] } `, `{"a":1,"a":2}`, `{"a":"\ud800"}`, `{"b":{"z":1,"y":[true,false,null]},"a":"é"}`, `null`, `"a=1"`, `[1]`, `{"k\u0065y":1}`)
	}
	// unusual returns a member that breaks some rule, or an odd but valid one.
	unusual := func() [2]string {
		return [2]string{
			pick(`"zz"`, `"Key"`, `"k\u0065y"`, `"batch_id"`, `"key"`, `"payload"`, `"claim"`, `"outcome"`, `"error"`, `"items"`, `"batch\u005fid"`),
			pick(`null`, `1`, `"x"`, `{"k":[1,{"q":"}"}]}`, `[]`, `true`, `-0.5e3`, `"\u00e9\n"`),
		}
	}
	beforeItem := func(i int) string {
		if !good && rng.IntN(30) == 0 {
			return pick(`null`, `5`, `"x"`, `[]`, `{}`, `[{"key":"a"}]`, `{"key":"a","payload":{}`+space()+`}`)
		}
		var m [][2]string
		if rng.IntN(5) > 0 {
			m = append(m, [2]string{`"key"`, choose(4, fmt.Sprintf(`"k-%d"`, i), fmt.Sprintf(`"k-%d"`, i%3), `"k\u002d1"`, long("k", 200), `"a/b"`, `""`, `5`, `null`, long("k", 201))})
		} else {
			m = append(m, [2]string{`"workflow"`, choose(1, `"wf"`, `"w:f"`, `1`)}, [2]string{`"object"`, `"obj"`})
			if good || rng.IntN(4) > 0 {
				m = append(m, [2]string{`"action"`, `"act"`})
			}
			m = append(m, [2]string{`"sequence"`, choose(3, `1`, `"7"`, `"a.b"`, `-1`, `1.5`, `null`, `"a:b"`, `true`)})
		}
		if good || rng.IntN(10) > 0 {
			m = append(m, [2]string{`"payload"`, payload()})
		}
		optional := [][2]string{
			{`"destination"`, choose(5, `"billing"`, long("d", 200), long("é", 200), long("é", 101), `null`, long("d", 201), `7`)},
			{`"dedupe"`, choose(5, `"key"`, `"lookup"`, `"none"`, `""`, `null`, `"maybe"`, `"KEY"`)},
			{`"reference"`, choose(2, `"r-1"`, long("r", 500), long("r", 501), `{"id":1}`)},
			{`"batch_index"`, choose(3, `0`, `3`, `null`, `-1`, `1.5`, `"2"`, `1e2`)},
			{`"execution_id"`, choose(2, `"1"`, `null`, long("e", 201))},
			{`"owner"`, choose(2, `"me"`, long("o", 200), long("o", 201))},
			{`"lease_seconds"`, choose(4, `5`, `86400`, `null`, `300`, `4`, `86401`, `"300"`, `0`)},
		}
		for _, o := range optional {
			if rng.IntN(4) == 0 {
				m = append(m, o)
			}
		}
		for range rng.IntN(3) / 2 {
			if !good {
				m = append(m, unusual())
			}
		}
		rng.Shuffle(len(m), func(a, b int) { m[a], m[b] = m[b], m[a] })
		return object(m)
	}
	afterItem := func(i int) string {
		if !good && rng.IntN(30) == 0 {
			return pick(`null`, `5`, `"x"`, `[]`, `{}`)
		}
		m := [][2]string{
			{`"key"`, choose(1, fmt.Sprintf(`"k-%d"`, i), `"a/b"`, `5`, `null`)},
			{`"claim"`, choose(1, `"c_1"`, `""`, long("c", 201), `null`, `3`)},
			{`"outcome"`, choose(2, `"succeeded"`, `"unknown"`, `"failed"`, `"done"`, `""`)},
		}
		optional := [][2]string{
			{`"external_id"`, choose(4, `"x1"`, `12`, `-3.5`, `null`, `{"id":1}`, long("x", 501), `true`)},
			{`"receiver_request_id"`, choose(3, `"r1"`, `7`, long("r", 500))},
			{`"result"`, choose(3, `{"id":1}`, `null`, ` {"a":[1]} `, `"ok"`, `[1]`)},
			{`"http_status"`, choose(3, `200`, `201`, `null`, `503`, `99`, `600`, `"500"`)},
			{`"error"`, choose(5, `{"class":"timeout"}`, `null`, `{"class":"other","code":5,"message":{"a":1},"extra":true}`, `{"Class":"dns"}`, `{}`,
				`{"class":"http"}`, `{"class":"boom"}`, `{"class":7}`, `"timeout"`)},
			{`"retry_after"`, choose(3, `0`, `30`, `null`, `-1`, `31536001`, `"5"`)},
		}
		for _, o := range optional {
			if rng.IntN(3) == 0 {
				m = append(m, o)
			}
		}
		for range rng.IntN(3) / 2 {
			if !good {
				m = append(m, unusual())
			}
		}
		rng.Shuffle(len(m), func(a, b int) { m[a], m[b] = m[b], m[a] })
		return object(m)
	}
	out := make([]string, 0, n)
	for range n {
		good = rng.IntN(2) == 0
		count := pick("1", "2", "5", "12")
		var list []string
		switch rng.IntN(40) {
		case 0:
			count = pick("500", "501")
		case 1:
			count = "0"
		}
		var c int
		fmt.Sscan(count, &c)
		for i := range c {
			if kind == "before" {
				list = append(list, beforeItem(i))
			} else {
				list = append(list, afterItem(i))
			}
		}
		itemsText := space() + "[" + space() + strings.Join(list, ","+space()) + "]" + space()
		var top [][2]string
		if kind == "before" && (good || rng.IntN(12) > 0) {
			top = append(top, [2]string{`"batch_id"`, choose(3, `"exec-1:Send"`, long("b", 200), long("é", 200), `""`, long("b", 201), `null`, `5`)})
		}
		switch rng.IntN(25) + btoi(good)*100 {
		case 0: // no items
		case 1:
			top = append(top, [2]string{`"items"`, pick(`null`, `{}`, `"x"`, `[]`)})
		case 2:
			top = append(top, [2]string{`"items"`, itemsText}, [2]string{`"items"`, `[]`})
		case 3:
			top = append(top, [2]string{`"it\u0065ms"`, itemsText})
		case 4:
			top = append(top, [2]string{`"items"`, itemsText}, [2]string{`"zz"`, `1`})
		case 5:
			top = append(top, [2]string{`"Items"`, itemsText})
		case 6:
			top = append(top, [2]string{`"items"`, itemsText}, [2]string{`"items"`, itemsText})
		case 7:
			top = append(top, [2]string{`"items"`, itemsText}, [2]string{`"batch_id"`, `"again"`})
		default:
			top = append(top, [2]string{`"items"`, itemsText})
		}
		rng.Shuffle(len(top), func(a, b int) { top[a], top[b] = top[b], top[a] })
		body := object(top)
		switch rng.IntN(40) + btoi(good)*100 {
		case 0:
			body += pick(`x`, `{}`, `]`)
		case 1:
			body = body[:rng.IntN(len(body))] // cut short
		case 2:
			body = strings.Replace(body, `"`, "\"\xff", 1) // not UTF-8
		case 3:
			body = pick(`[]`, `null`, ``, `  `, `"items"`)
		}
		out = append(out, body)
	}
	return out
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// decodedBatch is what decoding a batch body gave, for comparison.
func decodedBatch(v any, err error) string {
	if err != nil {
		var e *items.Error
		if errors.As(err, &e) {
			return fmt.Sprintf("error %s: %s %+v", e.Code, e.Message, e.Fields)
		}
		return "error " + err.Error()
	}
	b, merr := json.Marshal(v)
	if merr != nil {
		return "unmarshalable " + merr.Error()
	}
	return string(b)
}

// TestQuickBatchDecodingIsCareful holds the quick decoding of whole batch bodies to the careful decoding
// item by item: for every body, the same batch (or reports) or the same error, message and fields alike.
func TestQuickBatchDecodingIsCareful(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const perKind = 2000
	quickRefused := 0
	for _, kind := range []string{"before", "after"} {
		for _, body := range batchCorpus(rng, kind, perKind) {
			decode := func(quick bool) (any, error) {
				if kind == "before" {
					return batchFromBody([]byte(body), "acme", quick)
				}
				return reportsFromBody([]byte(body), "acme", quick)
			}
			quickV, quickErr := decode(true)
			carefulV, carefulErr := decode(false)
			q, c := decodedBatch(quickV, quickErr), decodedBatch(carefulV, carefulErr)
			if q != c || !reflect.DeepEqual(quickV, carefulV) {
				t.Fatalf("%s body %s:\nquick   %s\ncareful %s", kind, body, q, c)
			}
			if quickErr != nil {
				quickRefused++
			}
		}
	}
	// The corpus is meant to be mostly refused bodies, and some accepted ones.
	if total := 2 * perKind; quickRefused < total/2 || quickRefused > total*5/6 {
		t.Errorf("%d of %d bodies refused; the corpus no longer mixes good and bad bodies", quickRefused, total)
	}
}

// TestJSONLineIsGinJSONAndANewline renders batch answers, random items, answers, reports and errors both
// ways (answers and reports by their own AppendJSON) and compares the bytes and headers: jsonLine writes
// what c.JSON writes, and a newline after it. (goccy/go-json's encoder does not: it escapes a backspace
// as \u0008 where encoding/json writes \b.)
func TestJSONLineIsGinJSONAndANewline(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	at := time.Date(2026, 11, 29, 21, 0, 0, 123456789, time.UTC)
	answer := items.Answer{Key: "k-<1>&\u2028", Decision: items.Proceed, Reason: "new", State: items.StateInFlight, Attempt: 2,
		Claim: "c_1", IdempotencyKey: "ik", LeaseExpiresAt: &at, RetryAfter: 3, ExternalID: "é\"\\", Result: json.RawMessage(`{"a": [1, "<b>"]}`),
		NeedsPerson: true, Message: "tab\there"}
	values := []any{
		batches.BeforeWriteResult{BatchID: "exec-1:<Send>", Items: []batches.ItemAnswer{{Answer: answer, BatchIndex: 4}, {BatchIndex: 0}},
			Counts: batches.DecisionCounts{Proceed: 1, Skip: 1}},
		batches.BeforeWriteResult{},
		batches.AfterWriteResult{Items: []batches.ItemReport{{Key: "a", Report: &items.Report{Key: "a", State: items.StateSucceeded, Message: "<ok>"}},
			{Key: "b", Error: &batches.ReportError{Code: items.CodeNotFound, Message: "no item with this key"}}}},
	}
	// Items drawn at random (the strings, times and results that JSON encoders treat specially), as
	// GET /v1/items/{key} shows them, and error answers.
	rng := rand.New(rand.NewPCG(20261201, 13))
	for i := range 300 {
		it := itemstest.RandomItem(rng)
		values = append(values, ItemView{Item: it, IdempotencyKey: "ik-" + it.Key, Reason: items.Reason(it.Cause)},
			items.Answer{Key: it.Key, Decision: items.Skip, State: it.State, Result: it.Result, Message: it.FailureMessage, LeaseExpiresAt: it.LeaseExpiresAt,
				Claim: it.Claim, IdempotencyKey: it.Fingerprint, Reference: it.Reference, ExternalID: it.ExternalID, NeedsPerson: it.NeedsPerson, RetryAfter: it.Attempt},
			items.Report{Key: it.Key, State: it.State, Reason: items.Reason(it.Cause), Attempt: it.Attempt, Message: it.FailureMessage, ResultDropped: it.Retryable},
			ErrorBody{Error: ErrorDetail{Code: items.CodeInvalid, Message: it.FailureMessage,
				Fields: []items.FieldProblem{{Field: fmt.Sprintf("items[%d].key", i), Problem: it.Cause}}}})
	}
	for _, v := range values {
		want, got := httptest.NewRecorder(), httptest.NewRecorder()
		c, _ := gin.CreateTestContext(want)
		c.JSON(http.StatusOK, v)
		c, _ = gin.CreateTestContext(got)
		c.Render(http.StatusOK, jsonLine{v})
		if got.Body.String() != want.Body.String()+"\n" || got.Code != want.Code || !reflect.DeepEqual(got.Header(), want.Header()) {
			t.Errorf("jsonLine %d %v %s\nc.JSON    %d %v %s", got.Code, got.Header(), got.Body, want.Code, want.Header(), want.Body)
		}
	}
}

// TestQuickDecodingIsCareful holds decodeStrict's quick decoding of a single body (goccy/go-json after
// encoding/json's scanner) to the careful one (encoding/json, token by token): for every item of the
// batch corpus, and every whole batch body taken as an item, the same request or the same problems.
func TestQuickDecodingIsCareful(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	quickAccepted := 0
	for _, kind := range []string{"before", "after"} {
		var bodies []string
		for _, body := range batchCorpus(rng, kind, 1000) {
			bodies = append(bodies, body)
			if b := strings.TrimLeft(body, " \t\r\n"); strings.HasPrefix(b, "{") {
				texts, _ := batchItemTexts([]byte(b), knownFields(reflect.TypeFor[batchReportsRequest]()))
				for _, text := range texts {
					bodies = append(bodies, string(text))
				}
			}
		}
		for _, body := range bodies {
			if !utf8.ValidString(body) {
				continue // refused before either decoding
			}
			decode := func(quick bool) (any, problems, error) {
				var dst any = &beforeWriteRequest{}
				if kind == "after" {
					dst = &afterWriteRequest{}
				}
				if quick {
					ps, err := decodeStrict([]byte(body), "items[1].", dst)
					return dst, ps, err
				}
				ps, err := decodeCareful([]byte(body), "items[1].", dst, knownFields(reflect.TypeOf(dst).Elem()))
				return dst, ps, err
			}
			quickV, quickPs, quickErr := decode(true)
			carefulV, carefulPs, carefulErr := decode(false)
			q, c := decodedBatch(quickV, quickErr), decodedBatch(carefulV, carefulErr)
			if quickErr != nil {
				quickV, carefulV = nil, nil // what is left of a refused body does not matter
				q, c = decodedBatch(nil, quickErr), decodedBatch(nil, carefulErr)
			}
			if q != c || !reflect.DeepEqual(quickV, carefulV) || !reflect.DeepEqual(quickPs, carefulPs) {
				t.Fatalf("%s body %s:\nquick   %s %+v\ncareful %s %+v", kind, body, q, quickPs, c, carefulPs)
			}
			if quickErr == nil {
				quickAccepted++
			}
		}
	}
	if quickAccepted < 500 {
		t.Errorf("only %d bodies accepted: the corpus no longer tests the quick decoding", quickAccepted)
	}
}

// FuzzQuickDecodingIsCareful holds decodeStrict (the quick decoding of a well-formed body) to the careful
// decoding for any body: the same request or the same problems, and no panic. The seeds run with go
// test; go test -fuzz FuzzQuickDecodingIsCareful ./handlers searches further.
func FuzzQuickDecodingIsCareful(f *testing.F) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, kind := range []string{"before", "after"} {
		for _, body := range batchCorpus(rng, kind, 40) {
			f.Add(kind == "after", []byte(body))
		}
	}
	f.Add(false, []byte(`{"key":"a","payload":{"n":1e400,"s":"\u0000\ud800"},"lease_seconds":1e2}`))
	f.Add(true, []byte(`{"key":"a","claim":"c","outcome":"failed","error":{"class":"http","code":{"a":[1]},"message":7},"http_status":5e2}`))
	f.Fuzz(func(t *testing.T, after bool, body []byte) {
		if !utf8.Valid(body) {
			return
		}
		newDst := func() any {
			if after {
				return &afterWriteRequest{}
			}
			return &beforeWriteRequest{}
		}
		quick, careful := newDst(), newDst()
		quickPs, quickErr := decodeStrict(body, "", quick)
		carefulPs, carefulErr := decodeCareful(body, "", careful, knownFields(reflect.TypeOf(careful).Elem()))
		q, c := decodedBatch(quick, quickErr), decodedBatch(careful, carefulErr)
		if quickErr != nil {
			q, c = decodedBatch(nil, quickErr), decodedBatch(nil, carefulErr)
		}
		if q != c || !reflect.DeepEqual(quickPs, carefulPs) {
			t.Fatalf("body %s:\nquick   %s %+v\ncareful %s %+v", body, q, quickPs, c, carefulPs)
		}
	})
}
