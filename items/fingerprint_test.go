package items_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/replaysafe/companion/items"
)

func TestCanonical(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"MembersSortedByBytes", `{"b":1,"a":2,"B":3,"é":4}`, `{"B":3,"a":2,"b":1,"é":4}`},
		{"NestedObjectsSorted", `{"z":{"y":1,"x":[{"b":1,"a":2}]}}`, `{"z":{"x":[{"a":2,"b":1}],"y":1}}`},
		{"ArraysKeepOrder", `{"a":[3,1,2]}`, `{"a":[3,1,2]}`},
		{"NumbersKeptAsText", `{"a":1.0,"b":1e2,"c":-0,"d":120.50}`, `{"a":1.0,"b":1e2,"c":-0,"d":120.50}`},
		{"WhitespaceRemoved", "{ \"a\" :\n [ true , false , null ] }", `{"a":[true,false,null]}`},
		{"EscapesOnlyQuoteBackslashControl", `{"a":"\u00e9\/\"\\\n\u001f<>&"}`, `{"a":"é/\"\\\u000a\u001f<>&"}`},
		{"SurrogatePairDecoded", `{"a":"\ud83d\ude00"}`, `{"a":"😀"}`},
		{"EmptyObject", `{}`, `{}`},
		{"DelimitersInStrings", "{\"b\":\"x,]} y\",\"a\":[ {\"d\":-1.5e+3 , \"c\":\"}\"} ,[],[ 1 ,true] ],\"c\":{ },\"e\":null}",
			`{"a":[{"c":"}","d":-1.5e+3},[],[1,true]],"b":"x,]} y","c":{},"e":null}`},
		{"SameMembersInSiblings", `{"y":{"a":1,"b":2},"x":{"b":[{"a":0}],"a":"b"}}`, `{"x":{"a":"b","b":[{"a":0}]},"y":{"a":1,"b":2}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := items.Canonical([]byte(tt.in))
			if err != nil {
				t.Fatalf("Canonical(%s): %v", tt.in, err)
			}
			if string(got) != tt.want {
				t.Errorf("Canonical(%s) = %s, want %s", tt.in, got, tt.want)
			}
			fp, _ := items.Fingerprint([]byte(tt.in))
			sum := sha256.Sum256([]byte(tt.want))
			if fp != hex.EncodeToString(sum[:]) {
				t.Errorf("Fingerprint is not the SHA-256 of the canonical form")
			}
		})
	}
}

func TestFingerprintDistinguishesNumberText(t *testing.T) {
	t.Parallel()
	a, _ := items.Fingerprint([]byte(`{"amount":1}`))
	b, _ := items.Fingerprint([]byte(`{"amount":1.0}`))
	c, _ := items.Fingerprint([]byte(`{ "amount" : 1 }`))
	if a == b {
		t.Error("1 and 1.0 must have different fingerprints")
	}
	if a != c {
		t.Error("whitespace must not change the fingerprint")
	}
}

func TestCanonicalRefuses(t *testing.T) {
	t.Parallel()
	for name, in := range map[string]string{
		"DuplicateMember":       `{"a":1,"a":2}`,
		"NestedDuplicateMember": `{"x":{"a":1,"a":1}}`,
		"DeepDuplicateMember":   `{"x":[1,{"b":{"a":1,"c":[],"a":1}}],"a":1}`,
		"LoneHighSurrogate":     `{"a":"\ud800"}`,
		"LoneLowSurrogate":      `{"a":"\udc00x"}`,
		"HighThenNonLow":        `{"a":"\ud800\u0041"}`,
		"LoneSurrogateInName":   `{"\ud800":1}`,
		"NotAnObject":           `[1,2]`,
		"String":                `"a"`,
		"TrailingData":          `{"a":1} {"b":2}`,
		"Malformed":             `{"a":}`,
		"Empty":                 ``,
		"NotUTF8InString":       "{\"a\":\"\xff\"}",
		"NotUTF8InName":         "{\"\xc3\":1}",
		"NotUTF8WithEscape":     "{\"a\":\"\\n\xfe\"}",
	} {
		t.Run(name, func(t *testing.T) {
			if got, err := items.Canonical([]byte(in)); err == nil {
				t.Errorf("Canonical(%s) = %s, want an error", in, got)
			}
		})
	}
}

func TestValidKey(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]bool{
		"invoice-742:reminder:2":   true,
		"a":                        true,
		"A.b_c:d@e+f=g~h-1":        true,
		".a":                       true,
		"":                         false,
		".":                        false,
		"...":                      false,
		"a/b":                      false,
		"a b":                      false,
		"é":                        false,
		strings.Repeat("k", 200):   true,
		strings.Repeat("k", 201):   false,
		"percent%2Fencoded":        false,
		"tenant-8:invoice-742:x:2": true,
	} {
		if got := items.ValidKey(key); got != want {
			t.Errorf("ValidKey(%q) = %v, want %v", key, got, want)
		}
	}
	if items.ValidKeyPart("a:b") {
		t.Error("a key part must not hold a colon")
	}
}

func TestKeyParts(t *testing.T) {
	t.Parallel()
	p := items.KeyParts{Workflow: "billing", Object: "invoice-742", Action: "reminder", Sequence: "2"}
	if got := p.Key(); got != "billing:invoice-742:reminder:2" {
		t.Errorf("Key() = %q", got)
	}
	back, ok := items.SplitKey(p.Key())
	if !ok || back != p {
		t.Errorf("SplitKey(%q) = %+v, %v", p.Key(), back, ok)
	}
	for _, tt := range []struct {
		raw      string
		isString bool
		want     string
		ok       bool
	}{
		{"2", false, "2", true},
		{"0", false, "0", true},
		{"-1", false, "", false},
		{"1.5", false, "", false},
		{"step-2", true, "step-2", true},
		{"a:b", true, "", false},
	} {
		got, ok := items.ParseSequence(tt.raw, tt.isString)
		if ok != tt.ok || (ok && got != tt.want) {
			t.Errorf("ParseSequence(%q, %v) = %q, %v; want %q, %v", tt.raw, tt.isString, got, ok, tt.want, tt.ok)
		}
	}
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	secret := []byte("0123456789abcdef0123456789abcdef")
	a := items.IdempotencyKey(secret, "t1", "invoice-742:reminder:2")
	if len(a) != 35 || !strings.HasPrefix(a, "ik_") || strings.ToLower(a) != a {
		t.Fatalf("IdempotencyKey = %q, want ik_ + 32 lowercase hex", a)
	}
	// The contract's words: ik_ + the first 32 lowercase hex characters of HMAC-SHA256(secret, tenant NUL key).
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("t1\x00invoice-742:reminder:2"))
	if want := "ik_" + hex.EncodeToString(m.Sum(nil))[:32]; a != want {
		t.Errorf("IdempotencyKey = %q, want %q", a, want)
	}
	if a != items.IdempotencyKey(secret, "t1", "invoice-742:reminder:2") {
		t.Error("not stable")
	}
	if a == items.IdempotencyKey(secret, "t2", "invoice-742:reminder:2") {
		t.Error("tenants must not share idempotency keys")
	}
	// tenant NUL key: "t1"+"x" must not collide with "t" + "1x".
	if items.IdempotencyKey(secret, "t1", "x") == items.IdempotencyKey(secret, "t", "1x") {
		t.Error("tenant and key are not separated")
	}
	if a == items.IdempotencyKey([]byte("another secret"), "t1", "invoice-742:reminder:2") {
		t.Error("the key must depend on the ledger secret")
	}
	if strings.Contains(a, "742") {
		t.Error("the idempotency key reveals the key")
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	got := items.Redact("POST failed for jane.doe@example.com with Authorization: Bearer sk_live_abcdefghijklmnop card 4111111111111111")
	for _, leak := range []string{"jane.doe@example.com", "sk_live_abcdefghijklmnop", "4111111111111111"} {
		if strings.Contains(got, leak) {
			t.Errorf("Redact kept %q: %s", leak, got)
		}
	}
	if !strings.Contains(got, "POST failed") {
		t.Errorf("Redact lost the message: %s", got)
	}
	if n := len([]rune(items.Redact(strings.Repeat("é ", 400)))); n > items.MaxMessageLength {
		t.Errorf("Redact kept %d characters, want at most %d", n, items.MaxMessageLength)
	}
	if got := items.Redact(" \n\t"); got != "" {
		t.Errorf("Redact(spaces) = %q; want \"\"", got)
	}
}

// TestRedactNothingIsFree: every report of a success has no message, and redacting it allocates nothing.
func TestRedactNothingIsFree(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { items.Redact("") }); n != 0 {
		t.Errorf("Redact(\"\") allocates %.0f times; want none", n)
	}
}
