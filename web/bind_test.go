package web

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"
)

// bindTarget has a field of every JSON kind, nested.
type bindTarget struct {
	Email   string            `json:"email"`
	Count   int               `json:"count"`
	Ratio   float64           `json:"ratio"`
	On      *bool             `json:"on"`
	IDs     []string          `json:"ids"`
	Answers map[string]string `json:"answers"`
	Actions struct {
		MarkRead bool `json:"markRead"`
	} `json:"actions"`
	Conditions []struct {
		Field string `json:"field"`
	} `json:"conditions"`
}

func TestDecodeJSONFields(t *testing.T) {
	t.Parallel()
	cases := []struct {
		body, code, field string
		status            int
	}{
		{`{"actions":{"markRead":"yes"}}`, "invalid_type", "actions.markRead", 400},
		{`{"conditions":[{"field":1}]}`, "invalid_type", "conditions.field", 400},
		{`{"count":1.5}`, "invalid_type", "count", 400},
		{`{"count":1e99}`, "invalid_type", "count", 400},
		{`{"answers":{"a":1}}`, "invalid_type", "answers", 400},
		{`{"actions":{"archive":true}}`, "unknown_field", "archive", 400},
		{`"x"`, "invalid_type", "", 400},
		{`{"email":"a"}x`, "malformed_json", "", 400},
		{`{"email":"a",}`, "malformed_json", "", 400},
		{"\xff", "malformed_json", "", 400},
	}
	for _, c := range cases {
		var v bindTarget
		err := decodeJSON(strings.NewReader(c.body), &v, maxBodyBytes)
		var e *httpError
		if !errors.As(err, &e) {
			t.Errorf("%s: error %v is not *httpError", c.body, err)
			continue
		}
		if e.Status != c.status || e.Code != c.code || e.Field != c.field {
			t.Errorf("%s: got %d %s %q (%s), want %d %s %q", c.body, e.Status, e.Code, e.Field, e.Message, c.status, c.code, c.field)
		}
	}
	var v bindTarget
	if err := decodeJSON(strings.NewReader(` {"email":"a@b.c","on":true,"ids":["1"]} `), &v, maxBodyBytes); err != nil || v.Email != "a@b.c" || !*v.On {
		t.Errorf("good body: %v %+v", err, v)
	}
}

// FuzzBindJSON: whatever the body, decoding never panics and answers a
// client error (400 or 413), never a 500.
func FuzzBindJSON(f *testing.F) {
	for _, seed := range []string{
		``, `{}`, `null`, `[]`, `{"email":"a@b.c","count":1,"ratio":0.5,"on":false,"ids":["x"],"answers":{"k":"v"},"actions":{"markRead":true},"conditions":[{"field":"from"}]}`,
		`{"count":"1"}`, `{"actions":[]}`, `{"x":1}`, `{"email":"\ud800"}`, `{"a":` + strings.Repeat("[", 100), `{} {}`, "\x00", `1e999`,
	} {
		f.Add([]byte(seed))
	}
	e := newEnv(f, envOptions{queue: true}).h
	f.Fuzz(func(t *testing.T, body []byte) {
		var v bindTarget
		err := decodeJSON(bytes.NewReader(body), &v, 4096)
		if err != nil {
			var e *httpError
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T) is not *httpError", err, err)
			}
			if (e.Status != 400 && e.Status != 413) || e.Code == "" || e.Message == "" {
				t.Fatalf("body %q: %d %s %q", body, e.Status, e.Code, e.Message)
			}
		}
		// And through HTTP, on routes that bind JSON.
		for _, path := range []string{"/api/v1/users", "/api/v1/deadletters/redrive"} {
			w := request(t, e, http.MethodPost, path, body, bearer(testAPIToken))
			if w.Code == http.StatusInternalServerError {
				t.Fatalf("POST %s %q: %d %s", path, body, w.Code, w.Body.String())
			}
		}
	})
}
