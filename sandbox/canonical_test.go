package sandbox

import (
	"strings"
	"testing"
)

func TestCanonicalJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, want string
	}{
		{"MembersSortedByName", `{"b":1,"a":2,"B":3}`, `{"B":3,"a":2,"b":1}`},
		{"WhitespaceDropped", " {\n\t\"a\" : [ 1 , 2 ] } ", `{"a":[1,2]}`},
		{"NestedObjectsSorted", `{"z":{"y":1,"x":[{"q":1,"p":2}]}}`, `{"z":{"x":[{"p":2,"q":1}],"y":1}}`},
		{"ArraysKeepOrder", `[3,1,2]`, `[3,1,2]`},
		{"NumbersKeepTheirText", `{"a":1.0,"b":1e2,"c":-0}`, `{"a":1.0,"b":1e2,"c":-0}`},
		{"EscapesDecoded", `{"s":"\u00e9\/\u0041"}`, `{"s":"é/A"}`},
		{"OnlyQuoteBackslashAndControlEscaped", `{"s":"a\"b\\c\nd\u001f<>&"}`, `{"s":"a\"b\\c\u000ad\u001f<>&"}`},
		{"Literals", `[true,false,null]`, `[true,false,null]`},
		{"SortByUTF8Bytes", `{"é":1,"z":2}`, `{"z":2,"é":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := canonicalJSON([]byte(tc.in))
			if err != nil {
				t.Fatalf("canonicalJSON(%s): %v", tc.in, err)
			}
			if string(got) != tc.want {
				t.Errorf("canonicalJSON(%s) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}

func TestCanonicalJSONRejects(t *testing.T) {
	t.Parallel()
	for name, in := range map[string]string{
		"DuplicateMember":       `{"a":1,"a":1}`,
		"NestedDuplicateMember": `{"x":{"a":1,"a":2}}`,
		"TrailingValue":         `{} []`,
		"Truncated":             `{"a":`,
		"Empty":                 ``,
		"TooDeep":               strings.Repeat("[", maxDepth+2) + strings.Repeat("]", maxDepth+2),
	} {
		if got, err := canonicalJSON([]byte(in)); err == nil {
			t.Errorf("%s: canonicalJSON accepted %.40q as %s", name, in, got)
		}
	}
}
