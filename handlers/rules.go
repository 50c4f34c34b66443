package handlers

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// The validator is exact but costly for a batch: it walks each item by reflection and allocates for every
// nil pointer it meets. rulesMet checks the simple rules the request types use (required, omitempty,
// omitnil, min, max, oneof on strings and integers) directly, so that a request that meets them all is
// passed without the validator. Whatever rulesMet cannot vouch for goes to the validator, which finds and
// words the problems; so an answer never depends on which of the two looked.

// ruleSet is the field rules of a struct type.
type ruleSet struct {
	// known is false when a rule of the type (or of a struct in it) is one rulesMet does not check:
	// every value of the type then goes to the validator.
	known bool
	rules []fieldRule
}

// fieldRule is the rules of one field, as its validate tag states them.
type fieldRule struct {
	field    int
	pointer  bool     // the field is a pointer to what the rules apply to
	required bool     // required: not the zero value (not nil, for a pointer)
	omit     bool     // omitempty / omitnil: a zero value (nil pointer) passes whatever follows
	str      bool     // the rules apply to a string (min and max count characters) rather than an integer
	min, max *int64   // min=, max=
	oneof    []string // oneof=
	nested   *ruleSet // an untagged struct (or pointer to one) whose own fields have rules
}

var ruleSets sync.Map // reflect.Type → *ruleSet

// rulesOf returns the rules of struct type t.
func rulesOf(t reflect.Type) *ruleSet { return rulesWithin(t, 0) }

// rulesWithin is rulesOf for a struct nested depth deep in a request.
func rulesWithin(t reflect.Type, depth int) *ruleSet {
	if rs, ok := ruleSets.Load(t); ok {
		return rs.(*ruleSet)
	}
	if depth > 4 {
		return &ruleSet{} // a type that holds itself, or nests deeper than any request: the validator's
	}
	rs := &ruleSet{known: true}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("validate")
		if tag == "-" {
			continue
		}
		ft := f.Type
		pointer := ft.Kind() == reflect.Pointer
		if pointer {
			ft = ft.Elem()
		}
		if tag == "" {
			switch ft.Kind() {
			case reflect.Interface, reflect.Pointer:
				rs.known = false // the validator looks into the struct these hold
			case reflect.Struct:
				nested := rulesWithin(ft, depth+1)
				rs.known = rs.known && nested.known
				if len(nested.rules) > 0 {
					rs.rules = append(rs.rules, fieldRule{field: i, pointer: pointer, nested: nested})
				}
			}
			continue
		}
		r, ok := parseRule(tag, ft, pointer)
		if !ok {
			rs.known = false
			continue
		}
		r.field = i
		rs.rules = append(rs.rules, r)
	}
	ruleSets.Store(t, rs)
	return rs
}

// parseRule reads a validate tag on a field of type t (behind a pointer when pointer). ok is false for
// anything but the few rules rulesMet checks.
func parseRule(tag string, t reflect.Type, pointer bool) (r fieldRule, ok bool) {
	switch k := t.Kind(); {
	case k == reflect.String:
		r.str = true
	case k >= reflect.Int && k <= reflect.Int64 && t != reflect.TypeFor[time.Duration]():
	default:
		return r, false // the validator reads a duration's bounds as durations
	}
	r.pointer = pointer
	if strings.ContainsAny(tag, "|'") || strings.Contains(tag, "0x") {
		return r, false // alternatives, quoting and escaped separators are the validator's to read
	}
	for i, part := range strings.Split(tag, ",") {
		name, param, _ := strings.Cut(part, "=")
		switch {
		case name == "required" && i == 0:
			r.required = true
		case name == "omitempty" && i == 0 && !pointer, name == "omitnil" && i == 0 && pointer:
			r.omit = true
		case (name == "min" || name == "max") && param != "":
			// The validator reads a bound in any base Go knows; only plain decimals are read here.
			n, err := strconv.ParseInt(param, 10, 64)
			if err != nil || strconv.FormatInt(n, 10) != param {
				return r, false
			}
			if name == "min" {
				r.min = &n
			} else {
				r.max = &n
			}
		case name == "oneof" && r.str && param != "":
			r.oneof = strings.Fields(param)
		default:
			return r, false
		}
	}
	// A nil pointer that may not be left out is the validator's case.
	return r, !pointer || r.omit || r.required
}

// rulesMet reports whether dst, a pointer to a request struct, certainly meets its field rules: the
// validator would find no problem. false says only that the validator must look.
func rulesMet(dst any) bool {
	v := reflect.ValueOf(dst)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return false
	}
	rs := rulesOf(v.Elem().Type())
	return rs.known && rs.met(v.Elem())
}

func (rs *ruleSet) met(v reflect.Value) bool {
	for _, r := range rs.rules {
		f := v.Field(r.field)
		if r.pointer {
			if f.IsNil() {
				if r.required {
					return false
				}
				continue // omitnil, or an untagged pointer to a struct
			}
			f = f.Elem()
		}
		if r.nested != nil {
			if !r.nested.met(f) {
				return false
			}
			continue
		}
		if !r.valueMet(f) {
			return false
		}
	}
	return true
}

// valueMet checks the rules of one field on its value f (a string or an integer).
func (r fieldRule) valueMet(f reflect.Value) bool {
	var n int64 // the length in characters of a string, the value of an integer
	if r.str {
		s := f.String()
		if s == "" && !r.pointer && (r.omit || r.required) {
			return r.omit // omitempty passes an empty string, required refuses it
		}
		if r.oneof != nil && !slices.Contains(r.oneof, s) {
			return false
		}
		n = int64(utf8.RuneCountInString(s))
	} else {
		n = f.Int()
		if n == 0 && !r.pointer && (r.omit || r.required) {
			return r.omit
		}
	}
	return (r.min == nil || n >= *r.min) && (r.max == nil || n <= *r.max)
}
