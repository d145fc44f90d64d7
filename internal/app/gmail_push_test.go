package app_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"mailroom/internal/app"
	"mailroom/internal/app/apptest"
	"mailroom/internal/googlefake"
)

// TestPushBadInput sends every kind of bad push through HTTP: auth is
// checked first (401 missing or unverifiable, 403 verified but not for us),
// then the body (413 over 64 KiB, 400 malformed). Nothing gets a 5xx.
func TestPushBadInput(t *testing.T) {
	t.Parallel()
	fake := googlefake.StartForTest(t, googlefake.Options{PushAudience: pushAudience})
	ta := apptest.Start(t, withGoogle(fake, nil))
	userID := createUser(ta, "owner@example.com")
	connectAccount(ta, fake, userID, gmailAddr)

	good := fake.PushEnvelope(gmailAddr, 5)
	token := func(c googlefake.IDTokenClaims, flaws ...googlefake.TokenFlaw) string {
		return "Bearer " + fake.SignPushToken(c, flaws...)
	}
	valid := token(googlefake.IDTokenClaims{})
	data := func(s string) []byte {
		return []byte(`{"message":{"data":"` + base64.StdEncoding.EncodeToString([]byte(s)) + `","messageId":"1"},"subscription":"s"}`)
	}
	huge := append(append([]byte(`{"message":{"data":"`), bytes.Repeat([]byte("A"), 70<<10)...), `"}}`...)
	cases := []struct {
		name   string
		auth   string
		query  string
		body   []byte
		status int
	}{
		{"valid oidc", valid, "", good, 204},
		{"valid shared token", "", "?token=" + pushSharedKey, good, 204},
		{"historyId as a string", valid, "", data(`{"emailAddress":"ann@example.com","historyId":"77"}`), 204},
		{"unknown address", valid, "", fake.PushEnvelope("nobody@example.com", 9), 204},
		{"missing token", "", "", good, 401},
		{"not a bearer", "Basic YTpi", "", good, 401},
		{"garbage token", "Bearer not.a.jwt", "", good, 401},
		{"wrong shared token", "", "?token=guess", good, 401},
		{"expired", token(googlefake.IDTokenClaims{}, googlefake.FlawExpired), "", good, 401},
		{"bad signature", token(googlefake.IDTokenClaims{}, googlefake.FlawBadSignature), "", good, 401},
		{"unknown key", token(googlefake.IDTokenClaims{}, googlefake.FlawUnknownKey), "", good, 401},
		{"wrong issuer", token(googlefake.IDTokenClaims{}, googlefake.FlawWrongIssuer), "", good, 401},
		{"wrong audience", token(googlefake.IDTokenClaims{Audience: "https://elsewhere.example/push"}), "", good, 403},
		{"wrong email", token(googlefake.IDTokenClaims{Email: "intruder@evil.example"}), "", good, 403},
		{"unverified email", token(googlefake.IDTokenClaims{}, googlefake.FlawUnverifiedEmail), "", good, 403},
		{"bad token beats a big body", "", "", huge, 401},
		{"oversized", valid, "", huge, 413},
		{"empty body", valid, "", nil, 400},
		{"not json", valid, "", []byte("hello"), 400},
		{"json array", valid, "", []byte(`[1,2]`), 400},
		{"message a string", valid, "", []byte(`{"message":"x"}`), 400},
		{"no data", valid, "", []byte(`{"message":{"messageId":"1"}}`), 400},
		{"data a number", valid, "", []byte(`{"message":{"data":5}}`), 400},
		{"bad base64", valid, "", []byte(`{"message":{"data":"***"}}`), 400},
		{"data not json", valid, "", data(`nope`), 400},
		{"no email", valid, "", data(`{"historyId":5}`), 400},
		{"email a number", valid, "", data(`{"emailAddress":1,"historyId":5}`), 400},
		{"no history id", valid, "", data(`{"emailAddress":"ann@example.com"}`), 400},
		{"history id words", valid, "", data(`{"emailAddress":"ann@example.com","historyId":"lots"}`), 400},
		{"history id negative", valid, "", data(`{"emailAddress":"ann@example.com","historyId":-1}`), 400},
		{"history id object", valid, "", data(`{"emailAddress":"ann@example.com","historyId":{}}`), 400},
	}
	for _, tc := range cases {
		req, _ := http.NewRequest(http.MethodPost, ta.URL+"/push/gmail"+tc.query, bytes.NewReader(tc.body))
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var body struct {
			Error struct{ Code, Message string }
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s: status %d (%+v), want %d", tc.name, resp.StatusCode, body.Error, tc.status)
			continue
		}
		if tc.status >= 400 && (body.Error.Code == "" || body.Error.Message == "") {
			t.Errorf("%s: %d without the contract's error body", tc.name, tc.status)
		}
	}

	// The metrics count each outcome.
	_, raw := ta.Do(http.MethodGet, "/metrics", nil)
	for _, want := range []string{
		`mailroom_push_requests_total{outcome="accepted"} 3`,
		`mailroom_push_requests_total{outcome="unknown_address"} 1`,
		`mailroom_push_requests_total{outcome="unauthorized"} 9`,
		`mailroom_push_requests_total{outcome="forbidden"} 3`,
		`mailroom_push_requests_total{outcome="bad_request"} 15`,
	} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestPushRefusedWithoutAuthConfigured: with neither OIDC nor a shared
// token, every push is refused.
func TestPushRefusedWithoutAuthConfigured(t *testing.T) {
	t.Parallel()
	fake := googlefake.StartForTest(t, googlefake.Options{PushAudience: pushAudience})
	ta := apptest.Start(t, withGoogle(fake, func(cfg *app.Config) { cfg.PushAudience, cfg.PushToken = "", "" }))
	req, _ := http.NewRequest(http.MethodPost, ta.URL+"/push/gmail?token=anything", bytes.NewReader(fake.PushEnvelope(gmailAddr, 5)))
	req.Header.Set("Authorization", "Bearer "+fake.SignPushToken(googlefake.IDTokenClaims{}))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("status %d, want 403", resp.StatusCode)
	}
}
