package handlers

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// TestRulesMetAgreesWithValidator fills the request types with random values around their limits and
// checks that rulesMet vouches for a request exactly when the validator finds no problem in it.
func TestRulesMetAgreesWithValidator(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var texts []string
	for _, n := range []int{0, 1, 4, 5, 99, 100, 101, 199, 200, 201, 499, 500, 501, 1999, 2000, 2001} {
		texts = append(texts, strings.Repeat("a", n), strings.Repeat("é", n))
	}
	// The words of every oneof rule, and near misses; half the strings are one of them.
	words := []string{"key", "lookup", "none", "validation", "dns", "connection_refused", "tls", "timeout",
		"connection_reset", "http", "other", "found", "absent", "lookup_failed", "succeeded", "failed", "unknown",
		"not_committed", "KEY", "key ", "maybe", "a", ""}
	numbers := []int64{-1, 0, 1, 4, 5, 6, 99, 100, 101, 598, 599, 600, 86399, 86400, 86401, 31535999, 31536000, 31536001}
	// fill sets v to random values; tag is the validate tag of the field v is, whose oneof words are
	// chosen often.
	var fill func(v reflect.Value, tag string)
	fill = func(v reflect.Value, tag string) {
		switch v.Kind() {
		case reflect.String:
			_, oneof, _ := strings.Cut(tag, "oneof=")
			if oneof != "" && rng.IntN(2) == 0 {
				choices := strings.Fields(oneof)
				v.SetString(choices[rng.IntN(len(choices))])
			} else if rng.IntN(2) == 0 {
				v.SetString(words[rng.IntN(len(words))])
			} else {
				v.SetString(texts[rng.IntN(len(texts))])
			}
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			v.SetInt(numbers[rng.IntN(len(numbers))])
		case reflect.Pointer:
			if rng.IntN(3) > 0 {
				v.Set(reflect.New(v.Type().Elem()))
				fill(v.Elem(), tag)
			}
		case reflect.Struct:
			for i := range v.NumField() {
				if f := v.Type().Field(i); f.IsExported() || f.Anonymous {
					fill(v.Field(i), f.Tag.Get("validate"))
				}
			}
		case reflect.Slice:
			if v.Type().Elem().Kind() == reflect.Uint8 && rng.IntN(2) == 0 {
				v.SetBytes([]byte(`{}`))
			}
		}
	}
	types := []any{&beforeWriteRequest{}, &afterWriteRequest{}, &reconcileRequest{}, &resolveRequest{}, &batchRequest{}, &batchReportsRequest{}}
	for _, proto := range types {
		typ := reflect.TypeOf(proto).Elem()
		if !rulesOf(typ).known {
			t.Errorf("%s has a rule rulesMet does not know: its requests always go to the validator", typ)
		}
		met := 0
		for range 20000 {
			v := reflect.New(typ)
			// Most requests have every field set; a quarter only a few.
			if rng.IntN(4) > 0 {
				fill(v.Elem(), "")
			} else {
				for i := range typ.NumField() {
					if f := typ.Field(i); rng.IntN(3) == 0 && (f.IsExported() || f.Anonymous) {
						fill(v.Elem().Field(i), f.Tag.Get("validate"))
					}
				}
			}
			dst := v.Interface()
			err := validate.Struct(dst)
			if got := rulesMet(dst); got != (err == nil) {
				t.Fatalf("%s %+v: rulesMet %v, validator %v", typ, v.Elem(), got, err)
			}
			if err == nil {
				met++
			}
		}
		if met < 500 && typ.Name() != "batchRequest" && typ.Name() != "batchReportsRequest" {
			t.Errorf("%s: only %d of 20000 random requests met the rules; the test no longer tells much", typ, met)
		}
	}
}
