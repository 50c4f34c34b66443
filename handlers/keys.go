package handlers

import (
	"bytes"
	"encoding/json"

	"github.com/replaysafe/companion/items"
)

// keyFields name an item in a body: a key, or the four parts it is derived from.
type keyFields struct {
	Key      *string `json:"key" validate:"-"`
	Workflow *string `json:"workflow" validate:"-"`
	Object   *string `json:"object" validate:"-"`
	Action   *string `json:"action" validate:"-"`
	// Sequence is a non-negative integer or a string; both arrive here as raw JSON.
	Sequence json.RawMessage `json:"sequence" validate:"-"`
}

// itemKey is a key with the labels it was derived from (empty when the caller sent the key itself).
type itemKey struct {
	Key   string
	Parts items.KeyParts
}

// resolve returns the key the fields name: the key, or workflow:object:action:sequence. Key and parts
// together, neither, or only some parts are problems, as is a key or part outside the key rules.
func (k keyFields) resolve(prefix string, ps *problems) itemKey {
	parts := []struct {
		name string
		val  *string
	}{{"workflow", k.Workflow}, {"object", k.Object}, {"action", k.Action}}
	seq := bytes.TrimSpace(k.Sequence)
	hasSeq := len(seq) > 0 && string(seq) != "null"
	anyPart := hasSeq
	for _, p := range parts {
		anyPart = anyPart || p.val != nil
	}
	switch {
	case k.Key != nil && anyPart:
		ps.add(prefix+"key", "send either key or the four parts workflow, object, action, sequence, not both")
		return itemKey{}
	case k.Key != nil:
		if !items.ValidKey(*k.Key) {
			ps.add(prefix+"key", items.KeyRule)
		}
		return itemKey{Key: *k.Key}
	case !anyPart:
		ps.add(prefix+"key", "is required (or the four parts workflow, object, action, sequence)")
		return itemKey{}
	}
	before := len(*ps)
	var out itemKey
	vals := []*string{&out.Parts.Workflow, &out.Parts.Object, &out.Parts.Action}
	for i, p := range parts {
		switch {
		case p.val == nil:
			ps.add(prefix+p.name, "is required with the other key parts (or send key instead)")
		case !items.ValidKeyPart(*p.val):
			ps.add(prefix+p.name, items.PartRule)
		default:
			*vals[i] = *p.val
		}
	}
	switch {
	case !hasSeq:
		ps.add(prefix+"sequence", "is required with the other key parts (or send key instead)")
	default:
		text, ok := parseSequence(seq)
		if !ok {
			ps.add(prefix+"sequence", "must be a non-negative integer or a string of A-Z a-z 0-9 . _ @ + = ~ - (no colon)")
		}
		out.Parts.Sequence = text
	}
	if len(*ps) > before {
		return itemKey{}
	}
	out.Key = out.Parts.Key()
	if !items.ValidKey(out.Key) {
		ps.add(prefix+"key", "the derived key workflow:object:action:sequence "+items.KeyRule)
	}
	return out
}

func parseSequence(raw []byte) (string, bool) {
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", false
		}
		return items.ParseSequence(s, true)
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		return "", false
	}
	return items.ParseSequence(n.String(), false)
}
