package handlers

import (
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// The field rules of the request types (their validate tags) are checked first by passes, which reads
// the tags once per type and then checks a value without the reflection validator does per field (a
// fifth of a batch's decoding, with three allocations an item). passes answers only "no problem": a value
// it does not pass, or a type with a tag it does not know, goes to validator, which finds and words the
// problem. TestRulesPassOnlyWhatValidatorPasses holds it to validator on the batch corpus.

// fieldRule is the rule of one field, from its validate tag.
type fieldRule struct {
	index       []int
	kind        reflect.Kind // String, or Pointer to an int or to a struct
	required    bool
	omit        bool // omitempty (a string) or omitnil (a pointer)
	min, max    int64
	hasMin      bool
	hasMax      bool
	oneof       []string
	nested      []fieldRule // the rules of the struct a pointer points to
	nestedKnown bool
}

// typeRules are the rules of a request type; ok is false when a tag is one passes does not know.
type typeRules struct {
	rules []fieldRule
	ok    bool
}

var rulesCache sync.Map // reflect.Type → typeRules

func rulesOf(t reflect.Type) typeRules {
	if r, ok := rulesCache.Load(t); ok {
		return r.(typeRules)
	}
	r := typeRules{ok: true}
	r.rules = parseRules(t, nil, &r.ok)
	rulesCache.Store(t, r)
	return r
}

func parseRules(t reflect.Type, path []int, ok *bool) []fieldRule {
	var rules []fieldRule
	for i := range t.NumField() {
		f := t.Field(i)
		index := append(append([]int(nil), path...), i)
		tag, tagged := f.Tag.Lookup("validate")
		switch {
		case tag == "-" || !f.IsExported() && !f.Anonymous:
			continue
		case f.Anonymous && f.Type.Kind() == reflect.Struct && !tagged:
			rules = append(rules, parseRules(f.Type, index, ok)...)
			continue
		case f.Type.Kind() == reflect.Pointer && f.Type.Elem().Kind() == reflect.Struct && !tagged:
			// validator checks the struct a non-nil pointer points to.
			rules = append(rules, fieldRule{index: index, kind: reflect.Pointer, omit: true, nestedKnown: true,
				nested: parseRules(f.Type.Elem(), nil, ok)})
			continue
		case !tagged:
			if k := f.Type.Kind(); k == reflect.Struct || k == reflect.Pointer || k == reflect.Interface {
				*ok = false // a value validator might dive into
			}
			continue
		}
		r := fieldRule{index: index, kind: f.Type.Kind()}
		switch {
		case r.kind == reflect.String:
		case r.kind == reflect.Pointer && f.Type.Elem().Kind() == reflect.Int:
		default:
			*ok = false
			continue
		}
		for part := range strings.SplitSeq(tag, ",") {
			name, param, _ := strings.Cut(part, "=")
			var err error
			switch {
			case name == "required":
				r.required = true
			case name == "omitempty" && r.kind == reflect.String, name == "omitnil" && r.kind == reflect.Pointer:
				r.omit = true
			case name == "min":
				r.min, err = strconv.ParseInt(param, 10, 64)
				r.hasMin = true
			case name == "max":
				r.max, err = strconv.ParseInt(param, 10, 64)
				r.hasMax = true
			case name == "oneof" && r.kind == reflect.String:
				r.oneof = strings.Fields(param)
			default:
				*ok = false
			}
			if err != nil {
				*ok = false
			}
		}
		if r.kind == reflect.Pointer && !r.omit && !r.required {
			*ok = false // a nil pointer with a rule: validator's answer is not one passes gives
		}
		rules = append(rules, r)
	}
	return rules
}

// passes reports whether the struct dst points to certainly has no problem with its field rules.
func passes(dst any) bool {
	v := reflect.ValueOf(dst)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return false
	}
	r := rulesOf(v.Elem().Type())
	return r.ok && passesRules(v.Elem(), r.rules)
}

func passesRules(v reflect.Value, rules []fieldRule) bool {
	for i := range rules {
		r := &rules[i]
		f := v.FieldByIndex(r.index)
		if r.kind == reflect.Pointer {
			if f.IsNil() {
				if r.required {
					return false
				}
				continue
			}
			if r.nestedKnown {
				if !passesRules(f.Elem(), r.nested) {
					return false
				}
				continue
			}
			n := f.Elem().Int()
			if r.hasMin && n < r.min || r.hasMax && n > r.max {
				return false
			}
			continue
		}
		s := f.String()
		if s == "" {
			if r.required {
				return false
			}
			if r.omit {
				continue
			}
		}
		if r.oneof != nil && !oneOf(s, r.oneof) {
			return false
		}
		if r.hasMin || r.hasMax {
			// validator counts characters; a string of no more bytes than the limit has no more of them.
			n := int64(len(s))
			if r.hasMin || n > r.max {
				n = int64(utf8.RuneCountInString(s))
			}
			if r.hasMax && n > r.max || r.hasMin && n < r.min {
				return false
			}
		}
	}
	return true
}

func oneOf(s string, values []string) bool {
	for _, v := range values {
		if s == v {
			return true
		}
	}
	return false
}
