package googlefake_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"google.golang.org/api/gmail/v1"
	"google.golang.org/api/idtoken"
	"google.golang.org/api/option"

	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
)

const audience = "https://mailroom.example/push/gmail"

func TestPushTokens(t *testing.T) {
	t.Parallel()
	// The validator reaches the JWKS in process: no Start needed.
	srv := googlefake.New(googlefake.Options{PushAudience: audience})
	defer srv.Close()
	ctx := context.Background()
	v, err := idtoken.NewValidator(ctx, option.WithHTTPClient(srv.CertsHTTPClient()))
	check(t, err)

	p, err := v.Validate(ctx, srv.SignPushToken(googlefake.IDTokenClaims{}), audience)
	check(t, err)
	if p.Issuer != "https://accounts.google.com" || p.Claims["email"] != googlefake.DefaultPushServiceAccount ||
		p.Claims["email_verified"] != true || p.Audience != audience {
		t.Errorf("payload = %+v", p)
	}

	for _, tc := range []struct {
		name   string
		claims googlefake.IDTokenClaims
		flaw   googlefake.TokenFlaw
		valid  bool // passes idtoken's own checks (signature, aud, exp)
		check  func(*idtoken.Payload) bool
	}{
		{name: "expired", flaw: googlefake.FlawExpired},
		{name: "unknown key", flaw: googlefake.FlawUnknownKey},
		{name: "bad signature", flaw: googlefake.FlawBadSignature},
		{name: "wrong audience", claims: googlefake.IDTokenClaims{Audience: "https://other.example"}},
		{name: "wrong issuer", flaw: googlefake.FlawWrongIssuer, valid: true,
			check: func(p *idtoken.Payload) bool { return p.Issuer == "https://evil.example.com" }},
		{name: "unverified email", flaw: googlefake.FlawUnverifiedEmail, valid: true,
			check: func(p *idtoken.Payload) bool { return p.Claims["email_verified"] == false }},
		{name: "other email", claims: googlefake.IDTokenClaims{Email: "intruder@example.com"}, valid: true,
			check: func(p *idtoken.Payload) bool { return p.Claims["email"] == "intruder@example.com" }},
	} {
		var flaws []googlefake.TokenFlaw
		if tc.flaw != 0 {
			flaws = append(flaws, tc.flaw)
		}
		p, err := v.Validate(ctx, srv.SignPushToken(tc.claims, flaws...), audience)
		switch {
		case tc.valid && err != nil:
			t.Errorf("%s: %v, want it to pass signature checks", tc.name, err)
		case !tc.valid && err == nil:
			t.Errorf("%s: validated, want an error", tc.name)
		case tc.valid && !tc.check(p):
			t.Errorf("%s: payload %+v", tc.name, p)
		}
	}
}

func TestPushEnvelope(t *testing.T) {
	t.Parallel()
	srv := googlefake.New(googlefake.Options{})
	defer srv.Close()
	var env struct {
		Message struct {
			Data      string `json:"data"`
			MessageID string `json:"messageId"`
		} `json:"message"`
		Subscription string `json:"subscription"`
	}
	check(t, json.Unmarshal(srv.PushEnvelope(ann, 1234567), &env))
	data, err := base64.StdEncoding.DecodeString(env.Message.Data)
	check(t, err)
	if string(data) != `{"emailAddress":"ann@example.com","historyId":1234567}` || env.Message.MessageID == "" || env.Subscription == "" {
		t.Errorf("envelope = %+v, data %s", env, data)
	}
}

func TestPublishPush(t *testing.T) {
	t.Parallel()
	type push struct {
		auth string
		body []byte
	}
	var mu sync.Mutex
	var got []push
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, push{r.Header.Get("Authorization"), b})
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer app.Close()

	e := newEnv(t, googlefake.Options{PushURL: app.URL + "/push/gmail", PushAudience: audience})
	// No watch yet: changes are not pushed.
	must[string](t)(e.srv.Gmail.AddMessage(ann, googlefake.Message{Subject: "before"}))
	_, err := e.gmail.Users.Watch("me", &gmail.WatchRequest{TopicName: "projects/p/topics/t"}).Do()
	check(t, err)
	must[string](t)(e.srv.Gmail.AddMessage(ann, googlefake.Message{Subject: "after"}))
	want := e.srv.Gmail.HistoryID(ann)

	testkit.Eventually(t, 5*time.Second, "a push carrying the latest history id", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range got {
			var env struct {
				Message struct{ Data string } `json:"message"`
			}
			if json.Unmarshal(p.body, &env) != nil {
				continue
			}
			data, _ := base64.StdEncoding.DecodeString(env.Message.Data)
			var n struct {
				EmailAddress string
				HistoryID    uint64 `json:"historyId"`
			}
			if json.Unmarshal(data, &n) == nil && n.EmailAddress == ann && n.HistoryID == want {
				return true
			}
		}
		return false
	})
	mu.Lock()
	first := got[0]
	mu.Unlock()
	ctx := context.Background()
	v, err := idtoken.NewValidator(ctx, option.WithHTTPClient(e.srv.CertsHTTPClient()))
	check(t, err)
	if len(first.auth) < 8 {
		t.Fatalf("push without bearer token: %q", first.auth)
	}
	if _, err := v.Validate(ctx, first.auth[len("Bearer "):], audience); err != nil {
		t.Errorf("push token: %v", err)
	}
	testkit.Eventually(t, 5*time.Second, "the push to be counted", func() bool { return e.srv.PushStats().Sent > 0 })
	if st := e.srv.PushStats(); st.Failed != 0 {
		t.Errorf("push stats = %+v", st)
	}
}
