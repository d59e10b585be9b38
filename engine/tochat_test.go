package engine

import (
	"reflect"
	"testing"
)

// TestToChatCopiesEveryField: toChat gives the template every field of a Message
// (a field added to Message and not to toChat fails here).
func TestToChatCopiesEveryField(t *testing.T) {
	var m Message
	mv := reflect.ValueOf(&m).Elem()
	for i := range mv.NumField() {
		f := mv.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(mv.Type().Field(i).Name)
		case reflect.Slice:
			f.Set(reflect.ValueOf([]ToolCall{{ID: "c1", Name: "f", Arguments: "{}"}}))
		default:
			t.Fatalf("field %s of kind %s: extend the test", mv.Type().Field(i).Name, f.Kind())
		}
	}
	c := reflect.ValueOf(toChat(m))
	for i := range mv.NumField() {
		name := mv.Type().Field(i).Name
		cf := c.FieldByName(name)
		if !cf.IsValid() {
			t.Errorf("chat.Message has no field %s", name)
			continue
		}
		if !reflect.DeepEqual(cf.Interface(), mv.Field(i).Interface()) {
			t.Errorf("%s: %v, want %v", name, cf.Interface(), mv.Field(i).Interface())
		}
	}
}
