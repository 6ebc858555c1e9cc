package nethttp

import "testing"

func TestParseKeyField(t *testing.T) {
	cases := []struct {
		in     string
		legacy bool
		want   string
		ok     bool
	}{
		{`"abc"`, false, "abc", true},
		{`"a\\b\"c"`, false, `a\b"c`, true},
		{`"abc";p`, false, "abc", true},
		{`"abc";p=-12;q=0.125;r=?0;s=*tok/x:y`, false, "abc", true},
		{`"abc" `, false, "abc", true},
		{`"abc";p=1.2345`, false, "", false},
		{`"abc";p=1234567890123456`, false, "", false},
		{`"abc";p=:@@:`, false, "", false},
		{`"abc";p=?2`, false, "", false},
		{`"abc";p=`, false, "", false},
		{`"abc",`, false, "", false},
		{`abc`, false, "", false},
		{`abc`, true, "abc", true},
		{`abc;x`, true, "", false},
		{"\"ab\tc\"", false, "", false},
		{``, false, "", false},
		{`  `, true, "", false},
	}
	for _, c := range cases {
		got, err := parseKeyField(c.in, c.legacy)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parseKeyField(%q, legacy=%v) = %q, %v; want %q ok=%v", c.in, c.legacy, got, err, c.want, c.ok)
		}
	}
}

func TestCanonicalJSON(t *testing.T) {
	a, ok1 := canonicalJSON([]byte(`{"b": [1.50, {"y":1,"x":2}], "a": null}`))
	b, ok2 := canonicalJSON([]byte("{\"a\":null,\n\"b\":[1.50,{\"x\":2,\"y\":1}]}"))
	if !ok1 || !ok2 || string(a) != string(b) || string(a) != `{"a":null,"b":[1.50,{"x":2,"y":1}]}` {
		t.Fatalf("%s vs %s", a, b)
	}
	for _, bad := range []string{`{"a":1} {"b":2}`, `{"a":1} x`, `{"a":`, ``} {
		if _, ok := canonicalJSON([]byte(bad)); ok {
			t.Errorf("%q taken as one JSON value", bad)
		}
	}
}
