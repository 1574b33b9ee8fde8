package strictjson

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

type level string

type inner struct {
	Level level `json:"level"`
	Count int8  `json:"count"`
}

type outer struct {
	Name   string            `json:"name"`
	Inner  inner             `json:"inner"`
	List   []inner           `json:"list"`
	Labels map[string]string `json:"labels"`
	Hidden string            `json:"-"`
}

var levels = Options{StringTypes: map[reflect.Type]StringType{
	reflect.TypeFor[level](): {Want: "a level (low or high)", Check: func(s string) error {
		if s != "low" && s != "high" {
			return errors.New("not a level")
		}
		return nil
	}},
}}

// TestDecode_EveryProblem: each problem is reported at its path, all of
// them at once, and the target is left unchanged.
func TestDecode_EveryProblem(t *testing.T) {
	in := `{"name": "a", "Inner": {}, "inner": {"level": "mid", "count": 300}, "list": [{"level": 1}],
	        "labels": {"a b": 5}, "name": "b", "-": 1, "Hidden": "x"}`
	want := []Problem{
		{"Inner", `unknown key (keys are case-sensitive: did you mean "inner"?)`},
		{"inner.level", "not a level"},
		{"inner.count", "300 is out of range for a 8-bit integer"},
		{"list[0].level", "must be a level (low or high), got the number 1"},
		{`labels["a b"]`, "must be a string, got the number 5"},
		{"name", "duplicate key"},
		{"-", "unknown key"},
		{"Hidden", "unknown key"},
	}
	v := outer{Name: "unchanged"}
	got := Decode([]byte(in), &v, levels)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("problems:\n got %q\nwant %q", got, want)
	}
	if v.Name != "unchanged" {
		t.Fatalf("decoded despite problems: %+v", v)
	}
}

func TestDecode_Valid(t *testing.T) {
	var v outer
	in := `{"name": "a", "inner": {"level": "low", "count": -3}, "list": [{"level": "high"}], "labels": {"k": "v"}}`
	if got := Decode([]byte(in), &v, levels); got != nil {
		t.Fatalf("problems: %v", got)
	}
	if v.Name != "a" || v.Inner.Level != "low" || v.Inner.Count != -3 || len(v.List) != 1 || v.Labels["k"] != "v" {
		t.Fatalf("decoded %+v", v)
	}
}

// TestDecode_WholeInput: problems with the input as a whole have an empty
// path, and a syntax error stops the walk.
func TestDecode_WholeInput(t *testing.T) {
	for _, tt := range []struct{ in, path, msg string }{
		{" ", "", "empty input"},
		{"{\"name\": \"\xff\"}", "", "invalid UTF-8 at line 1, column 11"},
		{`{"name": "a"} x`, "", "unexpected data after the top-level JSON object at line 1, column 15"},
		{"{\n\"list\": [}", "list[0]", "syntax error at line 2, column 10"},
		{`null`, "", "null is not allowed"},
	} {
		var v outer
		got := Decode([]byte(tt.in), &v, Options{})
		if len(got) != 1 || got[0].Path != tt.path || !strings.Contains(got[0].Msg, tt.msg) {
			t.Errorf("%q: %q, want one problem at %q containing %q", tt.in, got, tt.path, tt.msg)
		}
	}
}

func TestPaths(t *testing.T) {
	for _, tt := range []struct{ got, want string }{
		{Field("", "sites"), "sites"},
		{Field(Elem("sites", 2), "leafnode"), "sites[2].leafnode"},
		{Field("events", "a b"), `events["a b"]`},
		{Field("", ""), `[""]`},
	} {
		if tt.got != tt.want {
			t.Errorf("%q, want %q", tt.got, tt.want)
		}
	}
}
