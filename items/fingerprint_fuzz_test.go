package items

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

// FuzzCanonical checks the canonical form the fingerprint is computed over (API.md, the payload's
// canonical form, and "Fingerprints are keyed"), on any bytes:
//   - what it returns is valid JSON, an object, and canonical already (Canonical(Canonical(x)) ==
//     Canonical(x)), and the plain path agrees with the decoding path byte for byte;
//   - it decodes (UseNumber) to the same value as x: two payloads with one canonical form are one value;
//   - x re-encoded with its members in another order, other whitespace and other string escapes has the
//     same canonical form;
//   - x with other whitespace between its tokens, or (well-formed x) with the members of its objects in
//     another order and every string kept as written, is refused when x is and has the same form when not;
//   - text that is not UTF-8 is refused (the decoder would turn it into U+FFFD: a payload nobody sent).
//
// seed drives the shuffling. Run: go test ./items -run '^$' -fuzz FuzzCanonical -fuzztime 3m
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{
		`{"b":1,"a":2,"B":3,"é":4}`,
		`{"z":{"y":1,"x":[{"b":1,"a":2}]}}`,
		`{"a":1.0,"b":1e2,"c":-0,"d":120.50}`,
		"{ \"a\" :\n [ true , false , null ] }",
		`{"a":"\u00e9\/\"\\\n\u001f<>&"}`,
		`{"a":"\ud83d\ude00"}`,
		`{}`,
		"{\"b\":\"x,]} y\",\"a\":[ {\"d\":-1.5e+3 , \"c\":\"}\"} ,[],[ 1 ,true] ],\"c\":{ },\"e\":null}",
		`{"a":1,"a":2}`,
		`{"x":[1,{"b":{"a":1,"c":[],"a":1}}],"a":1}`,
		`{"a":"\ud800"}`,
		`{"a":"\udc00x"}`,
		`{"\ud800":1}`,
		`{"a":"\ud800\u0041"}`,
		`{"\u0061":1,"a":2}`,
		`{"a\u0000b":"\u007f\u2028"}`,
		`[1,2]`,
		`{"a":1} {"b":2}`,
		`{"a":1 0}`,
		`{"a":[true false]}`,
		`{"a":}`,
		``,
		"{\"a\":\"\xff\"}",
		"{\"\xc3\":1}",
	} {
		f.Add([]byte(s), uint64(len(s)))
	}
	f.Fuzz(func(t *testing.T, x []byte, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
		canon, err := Canonical(x)
		spaced := respace(x, r)
		canonSpaced, errSpaced := Canonical(spaced)
		if (err == nil) != (errSpaced == nil) {
			t.Fatalf("Canonical(%q): %v; with other whitespace, Canonical(%q): %v", x, err, spaced, errSpaced)
		}
		if json.Valid(x) {
			// The members of every object in another order, every string and number kept as written
			// (escapes, lone surrogates, repeated names, bytes that are not UTF-8).
			reordered := reorderRaw(x, r)
			canonReordered, errReordered := Canonical(reordered)
			if (err == nil) != (errReordered == nil) || !bytes.Equal(canon, canonReordered) {
				t.Fatalf("Canonical(%q) = %q, %v; with its members in another order, Canonical(%q) = %q, %v",
					x, canon, err, reordered, canonReordered, errReordered)
			}
		}
		if err != nil {
			return
		}
		if !bytes.Equal(canon, canonSpaced) {
			t.Fatalf("other whitespace changed the form:\n%q -> %q\n%q -> %q", x, canon, spaced, canonSpaced)
		}
		if !utf8.Valid(x) {
			t.Fatalf("Canonical(%q) = %q: text that is not UTF-8 must be refused", x, canon)
		}
		if !json.Valid(canon) || len(canon) == 0 || canon[0] != '{' {
			t.Fatalf("Canonical(%q) = %q: not a JSON object", x, canon)
		}
		again, err := Canonical(canon)
		if err != nil || !bytes.Equal(again, canon) {
			t.Fatalf("not idempotent: Canonical(%q) = %q, then %q, %v", x, canon, again, err)
		}
		if plain, ok := canonicalPlain(x); ok {
			decoded, err := canonicalDecoded(x)
			if err != nil || !bytes.Equal(plain, decoded) {
				t.Fatalf("%q: plain %q, decoded %q, %v", x, plain, decoded, err)
			}
		}
		want := decodeNumbers(t, x)
		if got := decodeNumbers(t, canon); !reflect.DeepEqual(got, want) {
			t.Fatalf("%q and its canonical form %q decode to different values:\n%#v\n%#v", x, canon, want, got)
		}
		var shuffled bytes.Buffer
		reencode(&shuffled, want, r)
		got, err := Canonical(shuffled.Bytes())
		if err != nil || !bytes.Equal(got, canon) {
			t.Fatalf("re-encoded in another order the form changed:\n%q -> %q\n%q -> %q, %v", x, canon, shuffled.Bytes(), got, err)
		}
	})
}

func decodeNumbers(t *testing.T, text []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decoding %q: %v", text, err)
	}
	return v
}

// respace returns text with random JSON whitespace (or none) around each structural character outside
// strings, and every string kept byte for byte.
func respace(text []byte, r *rand.Rand) []byte {
	ws := func(out []byte) []byte {
		for range r.IntN(3) {
			out = append(out, " \t\r\n"[r.IntN(4)])
		}
		return out
	}
	out := ws(nil)
	inString := false
	for i := 0; i < len(text); i++ {
		c := text[i]
		if inString {
			out = append(out, c)
			switch c {
			case '\\':
				if i+1 < len(text) {
					i++
					out = append(out, text[i])
				}
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case ' ', '\t', '\r', '\n':
			// Whitespace between two bare tokens (the 1 and the 0 of "1 0", "true false") separates them:
			// deleting it would make one token of two ("10"), turning text that is refused into text that
			// is not. There one whitespace character stays; anywhere else any number, or none.
			next := i
			for next < len(text) && isJSONSpace(text[next]) {
				next++
			}
			if next < len(text) && bareByte(text[next]) && bareByte(lastNonSpace(out)) {
				out = append(out, " \t\r\n"[r.IntN(4)])
			}
			i = next - 1
			continue
		case '"':
			inString = true
			out = append(out, c)
		case '{', '}', '[', ']', ',', ':':
			out = ws(out)
			out = append(out, c)
			out = ws(out)
		default:
			out = append(out, c)
		}
	}
	return ws(out)
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// bareByte reports whether c belongs to a token that has no delimiter of its own (a number, true, false,
// null, or bytes that are no JSON at all); 0, the byte before the text, does not.
func bareByte(c byte) bool {
	return c != 0 && !isJSONSpace(c) && c != '"' && c != '{' && c != '}' && c != '[' && c != ']' && c != ',' && c != ':'
}

// lastNonSpace returns the last byte of out that is not whitespace, or 0.
func lastNonSpace(out []byte) byte {
	for i := len(out) - 1; i >= 0; i-- {
		if !isJSONSpace(out[i]) {
			return out[i]
		}
	}
	return 0
}

// reencode writes v (as decoded with UseNumber) as JSON with members in a random order, random
// whitespace and strings escaped at random.
func reencode(b *bytes.Buffer, v any, r *rand.Rand) {
	ws := func() {
		for range r.IntN(2) {
			b.WriteByte(" \t\r\n"[r.IntN(4)])
		}
	}
	ws()
	switch v := v.(type) {
	case map[string]any:
		names := make([]string, 0, len(v))
		for n := range v {
			names = append(names, n)
		}
		sort.Strings(names)
		r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		b.WriteByte('{')
		for i, n := range names {
			if i > 0 {
				b.WriteByte(',')
			}
			ws()
			reencodeString(b, n, r)
			ws()
			b.WriteByte(':')
			reencode(b, v[n], r)
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			reencode(b, e, r)
		}
		b.WriteByte(']')
	case string:
		reencodeString(b, v, r)
	case json.Number:
		b.WriteString(string(v))
	case bool:
		fmt.Fprint(b, v)
	case nil:
		b.WriteString("null")
	default:
		panic(fmt.Sprintf("unexpected %T", v))
	}
	ws()
}

func reencodeString(b *bytes.Buffer, s string, r *rand.Rand) {
	b.WriteByte('"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			if r.IntN(2) == 0 {
				b.WriteByte('\\')
				b.WriteRune(c)
			} else {
				fmt.Fprintf(b, `\u%04X`, c)
			}
		case c == '\n' && r.IntN(2) == 0:
			b.WriteString(`\n`)
		case c == '/' && r.IntN(2) == 0:
			b.WriteString(`\/`)
		case c < 0x20 || r.IntN(4) == 0:
			if c > 0xffff {
				hi, lo := utf16.EncodeRune(c)
				fmt.Fprintf(b, `\u%04x\u%04X`, hi, lo)
			} else {
				fmt.Fprintf(b, `\u%04x`, c)
			}
		default:
			b.WriteRune(c)
		}
	}
	b.WriteByte('"')
}

// rawValue is a JSON value as written: a string or a scalar's text, or an object's members (rawMember) or
// an array's elements.
type rawValue struct {
	text     []byte
	members  []rawMember
	elements []rawValue
	object   bool
	array    bool
}

type rawMember struct {
	name  []byte // as written, quotes and escapes included
	value rawValue
}

// parseRaw reads the value at b[i] of well-formed JSON (json.Valid) and returns it and the index after it.
func parseRaw(b []byte, i int) (rawValue, int) {
	i = plainSpace(b, i)
	switch b[i] {
	case '{':
		v := rawValue{object: true}
		i = plainSpace(b, i+1)
		for b[i] != '}' {
			end := rawStringEnd(b, i)
			name := b[i:end]
			i = plainSpace(b, end) + 1 // past ':'
			var value rawValue
			value, i = parseRaw(b, i)
			v.members = append(v.members, rawMember{name: name, value: value})
			if i = plainSpace(b, i); b[i] == ',' {
				i = plainSpace(b, i+1)
			}
		}
		return v, i + 1
	case '[':
		v := rawValue{array: true}
		i = plainSpace(b, i+1)
		for b[i] != ']' {
			var e rawValue
			e, i = parseRaw(b, i)
			v.elements = append(v.elements, e)
			if i = plainSpace(b, i); b[i] == ',' {
				i = plainSpace(b, i+1)
			}
		}
		return v, i + 1
	case '"':
		end := rawStringEnd(b, i)
		return rawValue{text: b[i:end]}, end
	}
	end := i
	for end < len(b) && !plainDelimiter(b[end]) {
		end++
	}
	return rawValue{text: b[i:end]}, end
}

// rawStringEnd returns the index after the string that starts at b[i].
func rawStringEnd(b []byte, i int) int {
	for i++; b[i] != '"'; i++ {
		if b[i] == '\\' {
			i++
		}
	}
	return i + 1
}

func (v rawValue) write(out []byte, r *rand.Rand) []byte {
	switch {
	case v.object:
		members := slices.Clone(v.members)
		r.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
		out = append(out, '{')
		for i, m := range members {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(append(out, m.name...), ':')
			out = m.value.write(out, r)
		}
		return append(out, '}')
	case v.array:
		out = append(out, '[')
		for i, e := range v.elements {
			if i > 0 {
				out = append(out, ',')
			}
			out = e.write(out, r)
		}
		return append(out, ']')
	}
	return append(out, v.text...)
}

// reorderRaw returns well-formed JSON text with the members of its objects shuffled.
func reorderRaw(text []byte, r *rand.Rand) []byte {
	v, _ := parseRaw(text, 0)
	return v.write(nil, r)
}
