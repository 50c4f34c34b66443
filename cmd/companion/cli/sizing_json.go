package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// The bench reads four strings of each answer (and an item's error code in a batch after-write), out
// of answers of ten fields and, for batches, 500 items. Decoding them with encoding/json's reflection
// cost more CPU than the calls' HTTP; this scan reads what the bench needs and steps over the rest. It
// decodes as encoding/json would into benchAnswer (names matched without regard to case, the last of a
// repeated name winning, null leaving a field empty) but does not validate what it steps over: it reads
// the answers of the service, not arbitrary JSON. TestBenchDecodeAgreesWithEncodingJSON holds it to
// encoding/json on the service's real answers.

// benchAnswer is what the bench reads of a before-write answer, or of an item of a batch answer.
type benchAnswer struct {
	Key      string `json:"key"`
	Decision string `json:"decision"`
	Reason   string `json:"reason"`
	Claim    string `json:"claim"`
	Error    string `json:"-"` // error.code: a batch after-write item's error
}

// decodeAnswer reads a before-write answer.
func decodeAnswer(b []byte) (benchAnswer, error) {
	var a benchAnswer
	s := jsonScan{b: b}
	if err := s.object(func(name []byte) error { return s.answerMember(name, &a) }); err != nil {
		return benchAnswer{}, err
	}
	return a, s.end()
}

// decodeItems reads the items of a batch answer into as (reused from a call before).
func decodeItems(b []byte, as []benchAnswer) ([]benchAnswer, error) {
	as = as[:0]
	s := jsonScan{b: b}
	err := s.object(func(name []byte) error {
		if !bytes.EqualFold(name, nameItems) {
			return s.skip()
		}
		if s.literal("null") {
			as = as[:0]
			return nil
		}
		if s.peek() != '[' {
			return s.fail("items is not an array")
		}
		s.i++
		// A repeated "items" decodes into the items before it, as encoding/json does into a slice.
		before, n := len(as), 0
		defer func() { as = as[:n] }()
		if s.peek() == ']' {
			s.i++
			return nil
		}
		for {
			if n == before {
				as, before = append(as, benchAnswer{}), before+1
			}
			a := &as[n]
			n++
			if err := s.object(func(name []byte) error { return s.answerMember(name, a) }); err != nil {
				return err
			}
			switch s.peek() {
			case ',':
				s.i++
			case ']':
				s.i++
				return nil
			default:
				return s.fail("no , or ] after an item")
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return as, s.end()
}

var (
	nameItems    = []byte("items")
	nameKey      = []byte("key")
	nameDecision = []byte("decision")
	nameReason   = []byte("reason")
	nameClaim    = []byte("claim")
	nameError    = []byte("error")
	nameCode     = []byte("code")
)

// answerMember reads the value of the member name of an answer into a, or steps over it.
func (s *jsonScan) answerMember(name []byte, a *benchAnswer) error {
	switch string(name) { // the names as the service writes them, without EqualFold's cost
	case "key":
		return s.stringInto(&a.Key)
	case "decision":
		return s.stringInto(&a.Decision)
	case "reason":
		return s.stringInto(&a.Reason)
	case "claim":
		return s.stringInto(&a.Claim)
	case "error":
		return s.errorInto(a)
	}
	if !foldable(name) {
		return s.skip()
	}
	switch {
	case bytes.EqualFold(name, nameKey):
		return s.stringInto(&a.Key)
	case bytes.EqualFold(name, nameDecision):
		return s.stringInto(&a.Decision)
	case bytes.EqualFold(name, nameReason):
		return s.stringInto(&a.Reason)
	case bytes.EqualFold(name, nameClaim):
		return s.stringInto(&a.Claim)
	case bytes.EqualFold(name, nameError):
		return s.errorInto(a)
	}
	return s.skip()
}

// errorInto reads an item's error object, its code into a.Error.
func (s *jsonScan) errorInto(a *benchAnswer) error {
	if s.literal("null") { // encoding/json sets the pointer to nil
		a.Error = ""
		return nil
	}
	return s.object(func(name []byte) error {
		if bytes.EqualFold(name, nameCode) {
			return s.stringInto(&a.Error)
		}
		return s.skip()
	})
}

// foldable reports whether name might equal another name without regard to case: whether it has an
// upper-case or non-ASCII letter (U+212A, the Kelvin sign, folds to k).
func foldable(name []byte) bool {
	for _, c := range name {
		if (c >= 'A' && c <= 'Z') || c >= utf8.RuneSelf {
			return true
		}
	}
	return false
}

// jsonScan reads a JSON text from its start.
type jsonScan struct {
	b []byte
	i int // the next byte to read
}

func (s *jsonScan) fail(what string) error {
	return fmt.Errorf("the answer is not the JSON expected: %s at byte %d", what, s.i)
}

// peek skips white space and returns the next byte, 0 at the end.
func (s *jsonScan) peek() byte {
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; c {
		case ' ', '\t', '\r', '\n':
		default:
			return c
		}
	}
	return 0
}

// end checks that only white space follows.
func (s *jsonScan) end() error {
	if s.peek() != 0 {
		return s.fail("more after the value")
	}
	return nil
}

// literal reads word (null, true, false) if it comes next.
func (s *jsonScan) literal(word string) bool {
	if s.peek() == word[0] && bytes.HasPrefix(s.b[s.i:], []byte(word)) {
		s.i += len(word)
		return true
	}
	return false
}

// object reads an object, calling member with each member's name when the scan is at its value;
// member reads the value or steps over it. null is an object without members, as encoding/json has it.
func (s *jsonScan) object(member func(name []byte) error) error {
	if s.literal("null") {
		return nil
	}
	if s.peek() != '{' {
		return s.fail("not an object")
	}
	s.i++
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		name, err := s.str()
		if err != nil {
			return err
		}
		if s.peek() != ':' {
			return s.fail("no : after a name")
		}
		s.i++
		if err := member(name); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return s.fail("no , or } after a member")
		}
	}
}

// stringInto reads a string into dst; null leaves dst as it is.
func (s *jsonScan) stringInto(dst *string) error {
	if s.literal("null") {
		return nil
	}
	v, err := s.str()
	if err != nil {
		return err
	}
	switch string(v) { // the words the service answers most, without a copy
	case "proceed":
		*dst = "proceed"
	case "new":
		*dst = "new"
	default:
		*dst = string(v)
	}
	return nil
}

// str reads a string: its bytes in the text when it has no escape, else a copy unescaped.
func (s *jsonScan) str() ([]byte, error) {
	start, end, err := s.rawString()
	if err != nil {
		return nil, err
	}
	raw := s.b[start:end]
	plain := true // no escape, all ASCII; else encoding/json unescapes it (and replaces bad UTF-8)
	for _, c := range raw {
		if c == '\\' || c >= utf8.RuneSelf {
			plain = false
			break
		}
	}
	if plain {
		return raw, nil
	}
	var v string
	if err := json.Unmarshal(s.b[start-1:end+1], &v); err != nil {
		return nil, fmt.Errorf("the answer is not the JSON expected: %w", err)
	}
	return []byte(v), nil
}

// rawString steps over a string, returning where its contents start and end in the text.
func (s *jsonScan) rawString() (start, end int, err error) {
	if s.peek() != '"' {
		return 0, 0, s.fail("not a string")
	}
	start = s.i + 1
	for j := start; ; j++ {
		k := bytes.IndexByte(s.b[j:], '"')
		if k < 0 {
			s.i = len(s.b)
			return 0, 0, s.fail("a string without its end")
		}
		j += k
		escapes := 0 // a quote is escaped if an odd number of backslashes precede it
		for p := j - 1; p >= start && s.b[p] == '\\'; p-- {
			escapes++
		}
		if escapes%2 == 0 {
			s.i = j + 1
			return start, j, nil
		}
	}
}

// skip steps over a value of any kind.
func (s *jsonScan) skip() error {
	switch s.peek() {
	case 0:
		return s.fail("the end where a value was expected")
	case '"':
		_, _, err := s.rawString()
		return err
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if _, _, err := s.rawString(); err != nil {
					return err
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					s.i++
					return nil
				}
			}
			s.i++
		}
		return s.fail("an object or array without its end")
	case ',', ':', '}', ']':
		return s.fail("no value")
	}
	start := s.i // a number, true, false or null
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			if s.i == start {
				return s.fail("no value")
			}
			return nil
		}
		s.i++
	}
	return nil
}
