package items_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/replaysafe/companion/items"
)

// fill sets every field reachable from v to a non-zero value, so that a field added to Item later is
// covered without changing this test.
func fill(t *testing.T, v reflect.Value, depth int) {
	t.Helper()
	if depth > 6 {
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Int, reflect.Int64:
		if v.Type() == reflect.TypeFor[time.Duration]() {
			v.SetInt(int64(time.Second))
		} else {
			v.SetInt(7)
		}
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem(), depth+1)
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			v.SetBytes([]byte(`{"id":"r"}`))
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fill(t, v.Index(i), depth+1)
		}
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(t, v.Field(i), depth+1)
			}
		}
	default:
		t.Fatalf("fill: a field of kind %s: teach fill and Item.Clone about it", v.Kind())
	}
}

// shared reports the path of a pointer or slice the two values share, or "".
func shared(a, b reflect.Value, path string) string {
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() {
			return ""
		}
		if a.Pointer() == b.Pointer() {
			return path
		}
		return shared(a.Elem(), b.Elem(), path)
	case reflect.Slice:
		if a.Len() == 0 {
			return ""
		}
		if a.Pointer() == b.Pointer() {
			return path
		}
		for i := range a.Len() {
			if p := shared(a.Index(i), b.Index(i), path+"[]"); p != "" {
				return p
			}
		}
	case reflect.Struct:
		for i := range a.NumField() {
			if a.Type().Field(i).IsExported() {
				if p := shared(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name); p != "" {
					return p
				}
			}
		}
	}
	return ""
}

func TestCloneIsDeep(t *testing.T) {
	t.Parallel()
	var it items.Item
	fill(t, reflect.ValueOf(&it).Elem(), 0)
	c := it.Clone()
	if !reflect.DeepEqual(*c, it) {
		t.Fatalf("clone differs:\n%+v\n%+v", *c, it)
	}
	if p := shared(reflect.ValueOf(c).Elem(), reflect.ValueOf(&it).Elem(), "Item"); p != "" {
		t.Fatalf("clone shares %s with the original", p)
	}
}
