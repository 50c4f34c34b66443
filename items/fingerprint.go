package items

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
	"sort"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Fingerprint returns the unkeyed fingerprint of payload, which must be a JSON object: the lowercase hex
// SHA-256 of its canonical form. Ledgers stored it before fingerprints were keyed; anyone can compute it,
// so a guessable payload (a card number, a phone number) could be found again from it by trying
// candidates. The ledger now stores Ledger.Fingerprint's keyed form, and computes this one only to
// recognise an item stored before (see samePayload).
//
// The canonical form: members sorted by the UTF-8 bytes of their names; arrays in order; numbers kept as
// their exact text (1 and 1.0 differ); strings re-encoded as UTF-8 escaping only '"', '\' and U+0000-U+001F
// (as \u00xx); no whitespace. Duplicate member names, lone surrogates and text that is not UTF-8 are
// refused.
func Fingerprint(payload []byte) (string, error) {
	canon, err := Canonical(payload)
	if err != nil {
		return "", err
	}
	return unkeyedFingerprint(canon), nil
}

// unkeyedFingerprint is Fingerprint of a canonical form.
func unkeyedFingerprint(canon []byte) string {
	sum := sha256.Sum256(canon)
	var text [2 * sha256.Size]byte
	hex.Encode(text[:], sum[:])
	return string(text[:])
}

// Fingerprint returns the keyed fingerprint of payload, which must be a JSON object: HMAC-SHA256(ledger
// secret, canonical form), lowercase hex. It is the fingerprint the ledger stores, shows and compares.
// The secret lives in the store and never leaves it, so whoever reads the database, a backup or an
// operator listing cannot test a guessed payload against a fingerprint.
func (l *Ledger) Fingerprint(payload []byte) (string, error) {
	canon, err := Canonical(payload)
	if err != nil {
		return "", err
	}
	m := l.mac()
	defer l.macs.Put(m)
	return keyedFingerprint(m, canon), nil
}

// KeyFingerprints sets the Fingerprint of every request that has none to the keyed fingerprint of its
// Canonical, with one HMAC for all of them. BeforeWriteMany calls it (BeforeWrite keys its one request
// the same way); a caller that builds items itself (NewPrepared) calls it first.
func (l *Ledger) KeyFingerprints(ps []BeforeWriteParams) {
	var m hash.Hash
	for i := range ps {
		if ps[i].Fingerprint != "" || ps[i].Canonical == nil {
			continue
		}
		if m == nil {
			m = l.mac()
			defer l.macs.Put(m)
		}
		ps[i].Fingerprint = keyedFingerprint(m, ps[i].Canonical)
	}
}

// mac returns an HMAC-SHA256 under the ledger secret from the ledger's pool (put it back when done): the
// hashes keyed with the secret are kept from one use to the next.
func (l *Ledger) mac() hash.Hash {
	if m, ok := l.macs.Get().(hash.Hash); ok {
		return m
	}
	return hmac.New(sha256.New, l.secret)
}

// keyedFingerprint returns the keyed fingerprint of a canonical form with m, an HMAC-SHA256 under the
// ledger secret, which it resets.
func keyedFingerprint(m hash.Hash, canon []byte) string {
	m.Reset()
	m.Write(canon)
	var sum [sha256.Size]byte
	var text [2 * sha256.Size]byte
	hex.Encode(text[:], m.Sum(sum[:0]))
	return string(text[:])
}

// samePayload reports whether stored, an item's fingerprint, is the fingerprint of the request's payload:
// its keyed fingerprint, or, for an item stored before fingerprints were keyed, its unkeyed one. The
// unkeyed one is computed only when the keyed one differs, and is never stored.
func samePayload(stored string, p BeforeWriteParams) bool {
	if stored == p.Fingerprint {
		return true
	}
	return p.Canonical != nil && stored == unkeyedFingerprint(p.Canonical)
}

// Canonical returns the canonical form of a JSON object (see Fingerprint).
func Canonical(payload []byte) ([]byte, error) {
	// Most payloads have no escape in any string: their names and strings are canonical as they stand, and
	// the form is built from the text directly. Anything else goes through the decoder below.
	if canon, ok := canonicalPlain(payload); ok {
		return canon, nil
	}
	return canonicalDecoded(payload)
}

// canonicalDecoded builds the canonical form token by token: the general path, which also finds and
// words every problem.
func canonicalDecoded(payload []byte) ([]byte, error) {
	// The decoder would turn every byte that is not UTF-8 into U+FFFD, as it does a lone surrogate: two
	// different payloads would share one fingerprint, which nobody sent.
	if !utf8.Valid(payload) {
		return nil, errors.New("must be UTF-8")
	}
	if err := CheckSurrogates(payload); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var buf bytes.Buffer
	tok, err := dec.Token()
	if err != nil {
		return nil, errors.New("must be a JSON object")
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("must be a JSON object")
	}
	if err := canonObject(dec, &buf); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("must be a single JSON object")
	}
	return buf.Bytes(), nil
}

type member struct {
	name  string
	value []byte
}

func canonValue(dec *json.Decoder, tok json.Token, buf *bytes.Buffer) error {
	switch v := tok.(type) {
	case json.Delim:
		switch v {
		case '{':
			return canonObject(dec, buf)
		case '[':
			buf.WriteByte('[')
			first := true
			for dec.More() {
				if !first {
					buf.WriteByte(',')
				}
				first = false
				t, err := dec.Token()
				if err != nil {
					return err
				}
				if err := canonValue(dec, t, buf); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil {
				return err
			}
			buf.WriteByte(']')
			return nil
		}
		return fmt.Errorf("unexpected %v", v)
	case string:
		return canonString(v, buf)
	case json.Number:
		buf.WriteString(string(v))
	case bool:
		buf.WriteString(strconv.FormatBool(v))
	case nil:
		buf.WriteString("null")
	default:
		return fmt.Errorf("unexpected token %v", v)
	}
	return nil
}

// canonObject reads the members of an object whose '{' was already read.
func canonObject(dec *json.Decoder, buf *bytes.Buffer) error {
	var members []member
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		name, ok := t.(string)
		if !ok {
			return errors.New("object member name must be a string")
		}
		if seen[name] {
			return fmt.Errorf("duplicate member name %q", name)
		}
		seen[name] = true
		vt, err := dec.Token()
		if err != nil {
			return err
		}
		var vb bytes.Buffer
		if err := canonValue(dec, vt, &vb); err != nil {
			return err
		}
		members = append(members, member{name: name, value: vb.Bytes()})
	}
	if _, err := dec.Token(); err != nil {
		return err
	}
	sort.Slice(members, func(i, j int) bool { return members[i].name < members[j].name })
	buf.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			buf.WriteByte(',')
		}
		if err := canonString(m.name, buf); err != nil {
			return err
		}
		buf.WriteByte(':')
		buf.Write(m.value)
	}
	buf.WriteByte('}')
	return nil
}

// canonicalPlain returns the canonical form of payload when payload is one well-formed JSON object in
// valid UTF-8 without a backslash and without a repeated member name; ok is false otherwise. Without
// escapes, a JSON string holds no '"', '\\' or control character, so its text is already canonical.
func canonicalPlain(payload []byte) (canon []byte, ok bool) {
	if bytes.IndexByte(payload, '\\') >= 0 || !utf8.Valid(payload) || !json.Valid(payload) {
		return nil, false
	}
	i := plainSpace(payload, 0)
	if i == len(payload) || payload[i] != '{' {
		return nil, false
	}
	out := make([]byte, 0, len(payload))
	out, _, ok = plainValue(payload, i, out)
	return out, ok
}

// plainMember is a member of an object in canonicalPlain: its name and where its canonical value is in
// the output.
type plainMember struct {
	name       []byte
	start, end int
}

// plainValue appends the canonical form of the value at b[i] (well-formed, without escapes) to out and
// returns out and the index after the value.
func plainValue(b []byte, i int, out []byte) ([]byte, int, bool) {
	switch b[i] {
	case '{':
		base := len(out)
		var room [8]plainMember // most objects have few members: no allocation for them
		members := room[:0]
		i = plainSpace(b, i+1)
		for b[i] != '}' {
			end := i + 1 + bytes.IndexByte(b[i+1:], '"')
			name := b[i+1 : end]
			i = plainSpace(b, end+1) + 1 // past ':'
			start := len(out)
			var ok bool
			if out, i, ok = plainValue(b, plainSpace(b, i), out); !ok {
				return out, i, false
			}
			members = append(members, plainMember{name: name, start: start, end: len(out)})
			if i = plainSpace(b, i); b[i] == ',' {
				i = plainSpace(b, i+1)
			}
		}
		slices.SortFunc(members, func(x, y plainMember) int { return bytes.Compare(x.name, y.name) })
		for x := 1; x < len(members); x++ {
			if bytes.Equal(members[x-1].name, members[x].name) {
				return out, i, false
			}
		}
		values := bytes.Clone(out[base:])
		out = append(out[:base], '{')
		for x, m := range members {
			if x > 0 {
				out = append(out, ',')
			}
			out = append(out, '"')
			out = append(out, m.name...)
			out = append(out, '"', ':')
			out = append(out, values[m.start-base:m.end-base]...)
		}
		return append(out, '}'), i + 1, true
	case '[':
		out = append(out, '[')
		i = plainSpace(b, i+1)
		for first := true; b[i] != ']'; first = false {
			if !first {
				out = append(out, ',')
			}
			var ok bool
			if out, i, ok = plainValue(b, i, out); !ok {
				return out, i, false
			}
			if i = plainSpace(b, i); b[i] == ',' {
				i = plainSpace(b, i+1)
			}
		}
		return append(out, ']'), i + 1, true
	case '"':
		end := i + 2 + bytes.IndexByte(b[i+1:], '"')
		return append(out, b[i:end]...), end, true
	}
	// A number, true, false or null: its text up to the next delimiter.
	end := i
	for end < len(b) && !plainDelimiter(b[end]) {
		end++
	}
	return append(out, b[i:end]...), end, true
}

func plainDelimiter(c byte) bool {
	switch c {
	case ',', ']', '}', ' ', '\t', '\r', '\n':
		return true
	}
	return false
}

func plainSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

const hexDigits = "0123456789abcdef"

// canonString writes s as a canonical JSON string. encoding/json decodes a lone surrogate escape
// (\ud800) to U+FFFD, so the check for lone surrogates happens on the raw text in checkSurrogates.
func canonString(s string, buf *bytes.Buffer) error {
	if !utf8.ValidString(s) {
		return errors.New("string is not valid UTF-8")
	}
	buf.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			buf.WriteString(`\"`)
		case r == '\\':
			buf.WriteString(`\\`)
		case r < 0x20:
			buf.WriteString(`\u00`)
			buf.WriteByte(hexDigits[r>>4])
			buf.WriteByte(hexDigits[r&0xf])
		default:
			buf.WriteRune(r)
		}
	}
	buf.WriteByte('"')
	return nil
}

// CheckSurrogates refuses JSON text that holds a lone UTF-16 surrogate escape such as "\ud800", which the
// standard decoder would silently turn into U+FFFD (and so into a fingerprint nobody sent).
func CheckSurrogates(text []byte) error {
	inString := false
	for i := 0; i < len(text); i++ {
		c := text[i]
		if !inString {
			if c == '"' {
				inString = true
			}
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			if i+1 < len(text) && text[i+1] == 'u' && i+5 < len(text) {
				r1, ok := hex4(text[i+2 : i+6])
				if ok && utf16.IsSurrogate(rune(r1)) {
					if r1 >= 0xDC00 {
						return errors.New("lone surrogate in string")
					}
					// A high surrogate must be followed by an escaped low surrogate.
					if i+11 < len(text) && text[i+6] == '\\' && text[i+7] == 'u' {
						r2, ok2 := hex4(text[i+8 : i+12])
						if ok2 && r2 >= 0xDC00 && r2 <= 0xDFFF {
							i += 11
							continue
						}
					}
					return errors.New("lone surrogate in string")
				}
			}
			i++ // skip the escaped character
		}
	}
	return nil
}

func hex4(b []byte) (uint16, bool) {
	n, err := strconv.ParseUint(string(b), 16, 16)
	return uint16(n), err == nil
}
