package gmail_test

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"mailroom/internal/googlefake"
	"mailroom/queue/gmail"
	"mailroom/queue/google"
	"mailroom/queue/google/accounts"
)

func envelope(data string) []byte {
	return []byte(`{"message":{"data":"` + base64.StdEncoding.EncodeToString([]byte(data)) + `","messageId":"1","publishTime":"2024-01-01T00:00:00Z"},"subscription":"projects/p/subscriptions/s"}`)
}

func TestDecodePush(t *testing.T) {
	t.Parallel()
	ok := []struct {
		name string
		body []byte
		want gmail.Notification
	}{
		{"number", envelope(`{"emailAddress":"ann@example.com","historyId":1234}`), gmail.Notification{EmailAddress: "ann@example.com", HistoryID: 1234}},
		{"string", envelope(`{"emailAddress":"ann@example.com","historyId":"98765"}`), gmail.Notification{EmailAddress: "ann@example.com", HistoryID: 98765}},
		{"url base64", []byte(`{"message":{"data":"` + base64.RawURLEncoding.EncodeToString([]byte(`{"emailAddress":"a@b.c","historyId":7}`)) + `"}}`), gmail.Notification{EmailAddress: "a@b.c", HistoryID: 7}},
		{"extra fields", envelope(`{"emailAddress":"a@b.c","historyId":7,"x":[1]}`), gmail.Notification{EmailAddress: "a@b.c", HistoryID: 7}},
	}
	for _, tc := range ok {
		got, err := gmail.DecodePush(tc.body)
		if err != nil || got != tc.want {
			t.Errorf("%s: got %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	bad := []struct{ name, body string }{
		{"empty", ``},
		{"not json", `hello`},
		{"array", `[]`},
		{"null", `null`},
		{"no message", `{"subscription":"s"}`},
		{"message not an object", `{"message":"x"}`},
		{"no data", `{"message":{"messageId":"1"}}`},
		{"data not a string", `{"message":{"data":12}}`},
		{"bad base64", `{"message":{"data":"%%%not base64%%%"}}`},
		{"data not json", string(envelope(`not json`))},
		{"no email", string(envelope(`{"historyId":5}`))},
		{"email not a string", string(envelope(`{"emailAddress":5,"historyId":5}`))},
		{"no history id", string(envelope(`{"emailAddress":"a@b.c"}`))},
		{"history id zero", string(envelope(`{"emailAddress":"a@b.c","historyId":0}`))},
		{"history id negative", string(envelope(`{"emailAddress":"a@b.c","historyId":-3}`))},
		{"history id fraction", string(envelope(`{"emailAddress":"a@b.c","historyId":1.5}`))},
		{"history id words", string(envelope(`{"emailAddress":"a@b.c","historyId":"twelve"}`))},
		{"history id bool", string(envelope(`{"emailAddress":"a@b.c","historyId":true}`))},
		{"history id too big", string(envelope(`{"emailAddress":"a@b.c","historyId":123456789012345678901234567890}`))},
	}
	for _, tc := range bad {
		if n, err := gmail.DecodePush([]byte(tc.body)); !errors.Is(err, gmail.ErrPushMalformed) {
			t.Errorf("%s: got %+v, %v; want ErrPushMalformed", tc.name, n, err)
		}
	}
}

func FuzzPushDecode(f *testing.F) {
	f.Add(envelope(`{"emailAddress":"ann@example.com","historyId":1234}`))
	f.Add(envelope(`{"emailAddress":"ann@example.com","historyId":"1234"}`))
	f.Add([]byte(`{"message":{"data":""}}`))
	f.Add([]byte(`{"message":{"data":"eyJ9"}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, body []byte) {
		n, err := gmail.DecodePush(body)
		if err != nil {
			if !errors.Is(err, gmail.ErrPushMalformed) {
				t.Fatalf("error %v does not wrap ErrPushMalformed", err)
			}
			return
		}
		if n.HistoryID == 0 || strings.TrimSpace(n.EmailAddress) == "" || n.EmailAddress != strings.TrimSpace(n.EmailAddress) {
			t.Fatalf("accepted an incomplete notification %+v", n)
		}
	})
}

// TestPushAuth checks every kind of bad token against the verifier and the
// shared token, at the pipeline level (the HTTP statuses are checked end to
// end in cmd/mailroom).
// es256OneByte turns a token into an ES256 one with a one-byte signature.
func es256OneByte(token string) string {
	parts := strings.Split(token, ".")
	header := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"ES256","kid":"0oeLcQ","typ":"JWT"}`))
	return header + "." + parts[1] + "." + base64.RawURLEncoding.EncodeToString([]byte{1})
}

func TestPushAuth(t *testing.T) {
	t.Parallel()
	fake := googlefake.StartForTest(t, googlefake.Options{PushAudience: "https://mailroom.example/push/gmail"})
	v, err := google.NewPushVerifier(context.Background(), google.PushVerifierConfig{
		CertsURL: fake.CertsURL(), Audience: "https://mailroom.example/push/gmail", ServiceAccount: googlefake.DefaultPushServiceAccount,
	})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOptions{cfg: gmail.Config{PushToken: "s3cret"}})
	p, err := gmail.New(gmail.Config{PushToken: "s3cret"}, gmail.Deps{DB: e.db, Accounts: newAccounts(t, accounts.Config{}, accounts.Deps{DB: e.db, Google: google.New(google.Config{})}), Queue: e.q, Verifier: v})
	if err != nil {
		t.Fatal(err)
	}
	body := fake.PushEnvelope("nobody@example.com", 5)
	cases := []struct {
		name  string
		auth  string
		token string
		want  error
	}{
		{"good oidc", "Bearer " + fake.SignPushToken(googlefake.IDTokenClaims{}), "", nil},
		{"good oidc, scheme in lower case", "bearer " + fake.SignPushToken(googlefake.IDTokenClaims{}), "", nil},
		{"good oidc, scheme in upper case", "BEARER " + fake.SignPushToken(googlefake.IDTokenClaims{}), "", nil},
		{"bearer with no token", "Bearer    ", "", gmail.ErrPushUnauthorized},
		{"good shared token", "", "s3cret", nil},
		{"missing", "", "", gmail.ErrPushUnauthorized},
		{"not bearer", "Basic abc", "", gmail.ErrPushUnauthorized},
		{"garbage", "Bearer abc.def.ghi", "", gmail.ErrPushUnauthorized},
		{"wrong shared token", "", "nope", gmail.ErrPushUnauthorized},
		{"expired", "Bearer " + fake.SignPushToken(googlefake.IDTokenClaims{}, googlefake.FlawExpired), "", gmail.ErrPushUnauthorized},
		{"bad signature", "Bearer " + fake.SignPushToken(googlefake.IDTokenClaims{}, googlefake.FlawBadSignature), "", gmail.ErrPushUnauthorized},
		{"unknown key", "Bearer " + fake.SignPushToken(googlefake.IDTokenClaims{}, googlefake.FlawUnknownKey), "", gmail.ErrPushUnauthorized},
		{"wrong issuer", "Bearer " + fake.SignPushToken(googlefake.IDTokenClaims{}, googlefake.FlawWrongIssuer), "", gmail.ErrPushUnauthorized},
		{"wrong audience", "Bearer " + fake.SignPushToken(googlefake.IDTokenClaims{Audience: "https://evil.example"}), "", gmail.ErrPushForbidden},
		{"wrong email", "Bearer " + fake.SignPushToken(googlefake.IDTokenClaims{Email: "evil@example.com"}), "", gmail.ErrPushForbidden},
		{"unverified email", "Bearer " + fake.SignPushToken(googlefake.IDTokenClaims{}, googlefake.FlawUnverifiedEmail), "", gmail.ErrPushForbidden},
		// idtoken's ES256 path panicked on a one-byte signature.
		{"ES256 one-byte signature", "Bearer " + es256OneByte(fake.SignPushToken(googlefake.IDTokenClaims{})), "", gmail.ErrPushUnauthorized},
		{"issued in the future", "Bearer " + fake.SignPushToken(googlefake.IDTokenClaims{IssuedAt: time.Now().Add(5 * time.Minute)}), "", gmail.ErrPushUnauthorized},
	}
	for _, tc := range cases {
		err := p.Push(context.Background(), gmail.PushRequest{Authorization: tc.auth, Token: tc.token, Body: body})
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// Auth comes before the body.
	if err := p.Push(context.Background(), gmail.PushRequest{TooLarge: true}); !errors.Is(err, gmail.ErrPushUnauthorized) {
		t.Errorf("oversized without auth: %v", err)
	}
	if err := p.Push(context.Background(), gmail.PushRequest{Token: "s3cret", TooLarge: true}); !errors.Is(err, gmail.ErrPushTooLarge) {
		t.Errorf("oversized with auth: %v", err)
	}
	// With neither OIDC nor a shared token, every push is refused.
	closed, err := gmail.New(gmail.Config{}, gmail.Deps{DB: e.db, Accounts: newAccounts(t, accounts.Config{}, accounts.Deps{DB: e.db, Google: google.New(google.Config{})}), Queue: e.q})
	if err != nil {
		t.Fatal(err)
	}
	if err := closed.Push(context.Background(), gmail.PushRequest{Token: "s3cret", Body: body}); !errors.Is(err, gmail.ErrPushForbidden) {
		t.Errorf("unconfigured intake: %v, want ErrPushForbidden", err)
	}
}
