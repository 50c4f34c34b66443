package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
	"github.com/go-playground/validator/v10"
	gojson "github.com/goccy/go-json"

	"github.com/replaysafe/companion/internal/typo"
	"github.com/replaysafe/companion/items"
)

// readBody applies the content-type (415) and size (413) rows of the order of checks, then reads the
// body. It never reads more than MaxBodyBytes+1 bytes.
func readBody(c *gin.Context) ([]byte, error) {
	if problem := checkContentType(c.GetHeader("Content-Type")); problem != "" {
		return nil, &items.Error{Code: CodeUnsupportedMediaType, Message: problem}
	}
	tooLarge := errBodyTooLarge
	if c.Request.ContentLength > MaxBodyBytes {
		return nil, tooLarge
	}
	// A body of a stated length is read into one buffer of that size (and room to see its end), rather
	// than one that grows and is copied as it is read.
	var buf bytes.Buffer
	if n := c.Request.ContentLength; n > 0 {
		buf.Grow(int(n) + bytes.MinRead)
	}
	if _, err := buf.ReadFrom(io.LimitReader(c.Request.Body, MaxBodyBytes+1)); err != nil {
		return nil, items.Invalid("body", "could not be read")
	}
	body := buf.Bytes()
	if len(body) > MaxBodyBytes {
		return nil, tooLarge
	}
	return body, nil
}

// errBodyTooLarge answers a body larger than MaxBodyBytes (413).
var errBodyTooLarge = &items.Error{Code: CodePayloadTooLarge, Message: fmt.Sprintf("the body is larger than %d bytes", MaxBodyBytes)}

// checkContentType accepts application/json and application/*+json, with parameters; a charset, if
// given, must be UTF-8 (JSON has no other).
func checkContentType(header string) string {
	const want = "the body must be JSON: Content-Type application/json"
	switch header {
	case "application/json", "application/json; charset=utf-8":
		return "" // what clients send, without parsing it into a map every call
	case "":
		return "missing Content-Type; " + want
	}
	mt, params, err := mime.ParseMediaType(header)
	if err != nil {
		return "unreadable Content-Type; " + want
	}
	sub, ok := strings.CutPrefix(mt, "application/")
	if !ok || (sub != "json" && !strings.HasSuffix(sub, "+json")) {
		return "Content-Type " + mt + " is not JSON; " + want
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
		return "charset " + cs + " is not UTF-8; " + want
	}
	return ""
}

// validate holds the field rules of the request types. Messages for its tags are in fieldProblem.
var validate = func() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			return ""
		}
		return name
	})
	return v
}()

// fieldProblem translates one validator failure into the contract's words.
func fieldProblem(fe validator.FieldError) string {
	numeric := fe.Kind() >= reflect.Int && fe.Kind() <= reflect.Float64
	switch fe.Tag() {
	case "required":
		return "is required"
	case "oneof":
		return "must be one of " + strings.Join(strings.Fields(fe.Param()), ", ")
	case "min":
		if numeric {
			return "must be at least " + fe.Param()
		}
		return "must be at least " + fe.Param() + " characters"
	case "max":
		if numeric {
			return "must be at most " + fe.Param()
		}
		return "must be at most " + fe.Param() + " characters"
	}
	return "is not valid (" + fe.Tag() + ")"
}

// problems collects field problems and turns them into one invalid_request error.
type problems []items.FieldProblem

func (p *problems) add(field, problem string) {
	for _, q := range *p {
		if q.Field == field {
			return // the first problem of a field is the one worth fixing first
		}
	}
	*p = append(*p, items.FieldProblem{Field: field, Problem: problem})
}

func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	msg := p[0].Field + ": " + p[0].Problem
	if len(p) > 1 {
		msg += fmt.Sprintf(" (and %d more problem(s), see fields)", len(p)-1)
	}
	return &items.Error{Code: items.CodeInvalid, Message: msg, Fields: p}
}

// decodeRequest reads the request body (415, 413) and decodes it strictly into dst (400), as decodeStrict.
func decodeRequest(c *gin.Context, dst any) (problems, error) {
	body, err := readBody(c)
	if err != nil {
		return problems{}, err
	}
	return decodeStrict(body, "", dst)
}

// decodeStrict decodes the JSON object body into dst, a pointer to a request struct. It refuses
// malformed JSON, anything but an object, a member name given twice, and members dst does not declare
// (at the top level; nested objects such as error are lenient), each as a 400 naming the field with
// prefix in front (for items of a batch: "items[3]."). A null member counts as absent. It returns the
// problems the field rules found, for the caller to add its own before answering.
func decodeStrict(body []byte, prefix string, dst any) (ps problems, err error) {
	if !utf8.Valid(body) {
		return nil, items.Invalid(prefixed(prefix, "body"), "is not valid UTF-8")
	}
	known := knownFields(reflect.TypeOf(dst).Elem())
	// The common body is well-formed and names each declared member once: it is decoded once, and its
	// member names are checked with a plain scan instead of a token walk. Anything else is decoded again
	// the careful way below, which finds the problem and words it.
	if body := bytes.TrimLeft(body, " \t\r\n"); len(body) > 0 && body[0] == '{' {
		if quickUnmarshal(body, dst) == nil {
			if ok, _ := namesDeclaredOnce(body, known, ""); ok {
				return validateRequest(prefix, dst)
			}
		}
		reflect.ValueOf(dst).Elem().SetZero()
	}
	return decodeCareful(body, prefix, dst, known)
}

// decodeCareful is decodeStrict for a body in UTF-8 that was not decoded the quick way: it walks the
// body token by token, to find its problem and word it.
func decodeCareful(body []byte, prefix string, dst any, known fieldSet) (ps problems, err error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	if err == io.EOF { // nothing but white space: a call that forgot its body, not a JSON text cut short
		return nil, items.Invalid(prefixed(prefix, "body"), "is empty: send a JSON object")
	}
	if err != nil {
		return nil, malformed(prefix, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, items.Invalid(prefixed(prefix, "body"), "must be a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, malformed(prefix, err)
		}
		name := tok.(string) // inside an object the decoder yields only string names
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, malformed(prefix, err)
		}
		switch {
		case seen[name]:
			ps.add(prefixed(prefix, name), "appears more than once")
		case !known.names[name]:
			ps.add(prefixed(prefix, name), known.unknownProblem(name))
		}
		seen[name] = true
	}
	if _, err := dec.Token(); err != nil {
		return nil, malformed(prefix, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, items.Invalid(prefixed(prefix, "body"), "must hold one JSON object and nothing after it")
	}
	if len(ps) > 0 {
		return nil, ps.err()
	}
	if err := json.Unmarshal(body, dst); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return nil, items.Invalid(prefixed(prefix, jsonPath(te.Field, known.embedded)), typeProblem(te.Type))
		}
		return nil, items.Invalid(prefixed(prefix, "body"), "could not be decoded: "+err.Error())
	}
	return validateRequest(prefix, dst)
}

// quickUnmarshal decodes body into dst as json.Unmarshal would, for a well-formed body: it checks the
// body with encoding/json's scanner, then decodes it with goccy/go-json, which does the same for the
// request types (TestQuickDecodingIsCareful, TestQuickBatchDecodingIsCareful) in a third of the time.
// A body it refuses is decoded again the careful way, which words the problem.
func quickUnmarshal(body []byte, dst any) error {
	if !json.Valid(body) {
		return errMalformedBody
	}
	return gojson.Unmarshal(body, dst)
}

// errMalformedBody is quickUnmarshal's refusal of a body that is not well-formed JSON.
var errMalformedBody = errors.New("handlers: malformed JSON")

// validateRequest applies the field rules to a decoded request and returns their problems.
func validateRequest(prefix string, dst any) (ps problems, err error) {
	if passes(dst) {
		return nil, nil
	}
	if err := validate.Struct(dst); err != nil {
		var ves validator.ValidationErrors
		if !errors.As(err, &ves) {
			return nil, fmt.Errorf("handlers: validate %T: %w", dst, err)
		}
		for _, fe := range ves {
			_, field, _ := strings.Cut(fe.Namespace(), ".") // drop the struct's own name
			ps.add(prefixed(prefix, field), fieldProblem(fe))
		}
	}
	return ps, nil
}

// namesDeclaredOnce reports whether every member name at the top level of the JSON object body is one
// the request declares, and none is given twice; and, when it is, whether one of them is flag. body must
// be one well-formed JSON object (json.Unmarshal accepted it) with nothing before its '{'. A name written
// with escapes is not compared (ok is false): the careful decoding in decodeStrict reads it.
func namesDeclaredOnce(body []byte, known fieldSet, flag string) (ok, hasFlag bool) {
	var seen [24][]byte
	n := 0
	i := skipSpace(body, 1)
	if i < len(body) && body[i] == '}' {
		return true, false
	}
	for i < len(body) {
		// body[i] is the '"' opening a member name.
		end := bytes.IndexByte(body[i+1:], '"')
		if end < 0 {
			return false, false
		}
		name := body[i+1 : i+1+end]
		if bytes.IndexByte(name, '\\') >= 0 || !known.names[string(name)] || n == len(seen) {
			return false, false
		}
		for _, s := range seen[:n] {
			if bytes.Equal(s, name) {
				return false, false
			}
		}
		seen[n] = name
		n++
		hasFlag = hasFlag || (flag != "" && string(name) == flag)
		i = skipSpace(body, i+end+2) // at ':'
		i = skipValue(body, skipSpace(body, i+1))
		i = skipSpace(body, i) // at ',' or '}'
		if i >= len(body) || body[i] == '}' {
			return true, hasFlag
		}
		i = skipSpace(body, i+1)
	}
	return false, false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// skipValue returns the index just after the well-formed JSON value that starts at b[i].
func skipValue(b []byte, i int) int {
	depth := 0
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			i = skipString(b, i)
			if depth == 0 {
				return i
			}
			i--
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1
			}
			if depth < 0 { // the end of the enclosing object: a scalar ended here
				return i
			}
		case ',', ' ', '\t', '\r', '\n':
			if depth == 0 {
				return i
			}
		}
	}
	return i
}

// skipString returns the index just after the JSON string whose opening '"' is at b[i].
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

func prefixed(prefix, field string) string { return prefix + field }

// jsonPath removes the Go names of embedded structs (keyFields) from a decoding error's field path:
// encoding/json reports them although they are not part of the JSON.
func jsonPath(field string, embedded map[string]bool) string {
	parts := strings.Split(field, ".")
	out := parts[:0]
	for _, p := range parts {
		if !embedded[p] {
			out = append(out, p)
		}
	}
	return strings.Join(out, ".")
}

func malformed(prefix string, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return items.Invalid(prefixed(prefix, "body"), fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, se))
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return items.Invalid(prefixed(prefix, "body"), "malformed JSON: it ends too early")
	}
	return items.Invalid(prefixed(prefix, "body"), "malformed JSON: "+err.Error())
}

// typeProblem says what type a field wants, in the words of JSON rather than Go.
func typeProblem(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "must be a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "must be a whole number"
	case reflect.Float32, reflect.Float64:
		return "must be a number"
	case reflect.Bool:
		return "must be true or false"
	case reflect.Struct, reflect.Map:
		return "must be an object"
	case reflect.Slice, reflect.Array:
		return "must be an array"
	}
	return "has the wrong type"
}

var knownFieldsCache sync.Map // reflect.Type → fieldSet

// fieldSet is what a request struct declares: its JSON member names, including those of embedded
// structs, and the Go names of those embedded structs.
type fieldSet struct {
	names    map[string]bool
	embedded map[string]bool
	// unknown is the problem of a member the struct does not declare: it lists the declared names, in
	// the order the struct declares them, so that a typo's fix is in the answer.
	unknown string
	order   []string
}

// unknownProblem is the problem of the undeclared member name: unknown, led by the declared name it most
// likely meant when one is a letter or two away ("paylod": payload), as the configuration file's and
// the command line's mistakes are answered.
func (fs fieldSet) unknownProblem(name string) string {
	best := typo.Nearest(name, fs.order, typo.Within(name))
	if best == "" {
		return fs.unknown
	}
	return "unknown field (did you mean " + best + "? allowed: " + strings.Join(fs.order, ", ") + ")"
}

func knownFields(t reflect.Type) fieldSet {
	if m, ok := knownFieldsCache.Load(t); ok {
		return m.(fieldSet)
	}
	fs := fieldSet{names: map[string]bool{}, embedded: map[string]bool{}}
	var order []string
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			switch {
			case name == "-":
			case f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct:
				fs.embedded[f.Name] = true
				walk(f.Type)
			case name != "":
				fs.names[name] = true
				order = append(order, name)
			}
		}
	}
	walk(t)
	fs.unknown = "unknown field (allowed: " + strings.Join(order, ", ") + ")"
	fs.order = order
	knownFieldsCache.Store(t, fs)
	return fs
}

// jsonObject checks an optional free-form member (payload, result): absent, or a JSON object.
func jsonObject(raw json.RawMessage) (present, ok bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return false, true
	}
	return true, raw[0] == '{'
}

// idText is an identifier the destination gave (external_id, receiver_request_id). Destinations hand
// out numeric ids as often as string ones, so a JSON number is kept as its exact text.
type idText string

// UnmarshalJSON implements json.Unmarshaler.
func (t *idText) UnmarshalJSON(b []byte) error {
	switch {
	case string(b) == "null":
		return nil
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*t = idText(s)
		return nil
	case len(b) > 0 && (b[0] == '-' || (b[0] >= '0' && b[0] <= '9')):
		*t = idText(b)
		return nil
	}
	return &json.UnmarshalTypeError{Value: "non-string", Type: reflect.TypeFor[string]()}
}

// looseText is a member of a workflow's error object (code, message): tools put strings, numbers or
// whole objects there, and the ledger keeps only redacted text, so any JSON value is accepted.
type looseText string

// UnmarshalJSON implements json.Unmarshaler.
func (t *looseText) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*t = looseText(s)
		return nil
	}
	if string(b) != "null" {
		*t = looseText(b)
	}
	return nil
}
