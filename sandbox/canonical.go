package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
)

// maxDepth bounds nesting so that a hostile body cannot make canonicalization
// recurse without limit; real records are a few levels deep.
const maxDepth = 512

// canonicalJSON re-encodes one JSON value in the canonical form the ledger
// fingerprints payloads with (docs/api.md): object members sorted by the UTF-8
// bytes of their names, arrays in order, numbers kept as their exact text
// (1 and 1.0 differ), strings re-encoded escaping only '"', '\' and
// U+0000–U+001F, no whitespace. Two bodies that differ only in member order,
// whitespace or string escaping therefore compare equal.
//
// Duplicate member names make a body ambiguous and are an error, as is any
// data after the value.
func canonicalJSON(data []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var out bytes.Buffer
	if err := writeCanonical(dec, &out, 0); err != nil {
		return nil, err
	}
	switch _, err := dec.Token(); {
	case errors.Is(err, io.EOF):
		return out.Bytes(), nil
	case err != nil:
		return nil, err
	default:
		return nil, errors.New("data after the JSON value")
	}
}

func writeCanonical(dec *json.Decoder, out *bytes.Buffer, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("nested deeper than %d levels", maxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	switch v := tok.(type) {
	case json.Delim:
		if v == '{' {
			return writeCanonicalObject(dec, out, depth)
		}
		out.WriteByte('[')
		for i := 0; dec.More(); i++ {
			if i > 0 {
				out.WriteByte(',')
			}
			if err := writeCanonical(dec, out, depth+1); err != nil {
				return err
			}
		}
		_, err := dec.Token() // ']'
		out.WriteByte(']')
		return err
	case string:
		writeCanonicalString(out, v)
	case json.Number:
		out.WriteString(v.String())
	case bool:
		out.WriteString(strconv.FormatBool(v))
	case nil:
		out.WriteString("null")
	}
	return nil
}

func writeCanonicalObject(dec *json.Decoder, out *bytes.Buffer, depth int) error {
	type member struct {
		name  string
		value []byte
	}
	var members []member
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		name, _ := tok.(string) // the decoder only yields string tokens in name position
		if seen[name] {
			return fmt.Errorf("duplicate member name %q", name)
		}
		seen[name] = true
		var value bytes.Buffer
		if err := writeCanonical(dec, &value, depth+1); err != nil {
			return err
		}
		members = append(members, member{name, value.Bytes()})
	}
	if _, err := dec.Token(); err != nil { // '}'
		return err
	}
	// Go compares strings byte by byte, which is the UTF-8 byte order asked for.
	sort.Slice(members, func(i, j int) bool { return members[i].name < members[j].name })
	out.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			out.WriteByte(',')
		}
		writeCanonicalString(out, m.name)
		out.WriteByte(':')
		out.Write(m.value)
	}
	out.WriteByte('}')
	return nil
}

func writeCanonicalString(out *bytes.Buffer, s string) {
	const hex = "0123456789abcdef"
	out.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			out.WriteByte('\\')
			out.WriteByte(c)
		case c < 0x20:
			out.WriteString(`\u00`)
			out.WriteByte(hex[c>>4])
			out.WriteByte(hex[c&0xf])
		default:
			out.WriteByte(c)
		}
	}
	out.WriteByte('"')
}
