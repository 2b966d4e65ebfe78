// Package testfill fills a value's every field for tests that hold a
// hand-written encoder to encoding/json: a field added to a type and not
// to its encoder then shows up as a difference.
package testfill

import (
	"encoding/json"
	"reflect"
	"testing"
)

var rawMessage = reflect.TypeOf(json.RawMessage(nil))

// Fill sets every exported field of the struct v points to, and of the
// structs, pointers and slices within it, to a value that is not zero:
// "x", 1, true, a RawMessage [1], a slice of one, an empty map. The fields
// of the outer struct named in skip are left as they are.
func Fill(t testing.TB, v any, skip ...string) {
	t.Helper()
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		t.Fatalf("testfill: %T is not a pointer to a struct", v)
	}
	skipped := map[string]bool{}
	for _, name := range skip {
		skipped[name] = true
	}
	fill(t, rv.Elem(), skipped)
}

func fill(t testing.TB, v reflect.Value, skip map[string]bool) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Slice:
		if v.Type() == rawMessage {
			v.SetBytes([]byte(`[1]`))
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(t, v.Index(0), nil)
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem(), nil)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if f := v.Type().Field(i); f.IsExported() && !skip[f.Name] {
				fill(t, v.Field(i), nil)
			}
		}
	default:
		t.Fatalf("testfill: no value for a %s", v.Type())
	}
}
