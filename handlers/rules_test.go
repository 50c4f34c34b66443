package handlers

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// TestRulesPassOnlyWhatValidatorPasses fills the request types with values drawn around every limit of
// their rules (lengths in bytes and in characters, each oneof value and others, numbers at and past
// their bounds, nil and non-nil pointers), and the items of the batch corpus, and holds passes to
// validator: what passes accepts validator accepts, and passes accepts nearly all of what validator
// accepts (else it saves nothing).
func TestRulesPassOnlyWhatValidatorPasses(t *testing.T) {
	types := []reflect.Type{reflect.TypeFor[beforeWriteRequest](), reflect.TypeFor[afterWriteRequest](),
		reflect.TypeFor[reconcileRequest](), reflect.TypeFor[resolveRequest]()}
	for _, typ := range types {
		if !rulesOf(typ).ok {
			t.Errorf("%s has a rule passes does not know: every request of it goes to validator", typ)
		}
	}
	rng := rand.New(rand.NewPCG(13, 4))
	str := func(limit int) string {
		n := max(0, limit+rng.IntN(5)-2)
		switch rng.IntN(6) {
		case 0:
			return ""
		case 1:
			return strings.Repeat("é", n) // twice as many bytes as characters
		case 2:
			return strings.Repeat("é", n/2) + strings.Repeat("x", n-n/2)
		case 3:
			return strings.Repeat("\xff", n%4) // not UTF-8: a character per byte
		}
		return strings.Repeat("x", n)
	}
	var fill func(v reflect.Value, tag string)
	fill = func(v reflect.Value, tag string) {
		limit := 10
		for part := range strings.SplitSeq(tag, ",") {
			name, param, _ := strings.Cut(part, "=")
			switch name {
			case "max", "min":
				if rng.IntN(2) == 0 {
					limit, _ = jsonInt(param)
				}
			case "oneof":
				if vals := strings.Fields(param); rng.IntN(4) > 0 {
					v.SetString(vals[rng.IntN(len(vals))])
					return
				}
			}
		}
		switch v.Kind() {
		case reflect.String:
			v.SetString(str(limit))
		case reflect.Pointer:
			if rng.IntN(3) == 0 {
				return
			}
			v.Set(reflect.New(v.Type().Elem()))
			fill(v.Elem(), tag)
		case reflect.Int:
			v.SetInt(int64(limit + rng.IntN(5) - 2))
		case reflect.Struct:
			for i := range v.NumField() {
				if f := v.Type().Field(i); f.IsExported() || f.Anonymous {
					fill(v.Field(i), f.Tag.Get("validate"))
				}
			}
		case reflect.Slice:
			if rng.IntN(2) == 0 {
				v.SetBytes([]byte(`{"a":1}`))
			}
		}
	}
	var values []any
	for range 20000 {
		for _, typ := range types {
			v := reflect.New(typ)
			fill(v.Elem(), "")
			values = append(values, v.Interface())
		}
	}
	for _, kind := range []string{"before", "after"} {
		for _, body := range batchCorpus(rng, kind, 500) {
			var whole struct{ Items []json.RawMessage }
			if json.Unmarshal([]byte(body), &whole) != nil {
				continue
			}
			for _, text := range whole.Items {
				var dst any = &beforeWriteRequest{}
				if kind == "after" {
					dst = &afterWriteRequest{}
				}
				if json.Unmarshal(text, dst) == nil {
					values = append(values, dst)
				}
			}
		}
	}
	valid, passed := 0, 0
	for _, v := range values {
		p, err := passes(v), validate.Struct(v)
		if p && err != nil {
			t.Fatalf("passes accepted %+v; validator: %v", v, err)
		}
		if err == nil {
			valid++
			if p {
				passed++
			}
		}
	}
	t.Logf("%d values, %d valid, %d of them passed", len(values), valid, passed)
	if valid < len(values)/10 || passed < valid*9/10 {
		t.Errorf("%d values, %d valid, %d of them passed: the test no longer mixes, or passes no longer saves", len(values), valid, passed)
	}
}

func jsonInt(s string) (int, error) {
	var n int
	err := json.Unmarshal([]byte(s), &n)
	return n, err
}
