package web

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"mailroom/internal/googlefake"
	"mailroom/queue/broker/brokertest"
	"mailroom/queue/sheets"
)

// jwt builds a compact JWT from its header and claims, with sig as its
// signature (no real signing: these are hostile tokens).
func jwt(header, claims map[string]any, sig []byte) string {
	enc := func(v any) string {
		raw, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(raw)
	}
	return enc(header) + "." + enc(claims) + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// hostileCase is one bad request and the 4xx it must get.
type hostileCase struct {
	name         string
	method, path string
	body         any // string, []byte, url.Values or nil
	headers      map[string]string
	status       int
	code         string // the error code, when it is fixed
}

// TestHostileInputs sends bad requests to the push endpoint, the API, the
// admin forms and the OAuth callback: each gets its 4xx in the contract's
// error shape (JSON; the admin pages' HTML error page under /admin), none
// a 5xx, and the process answers /healthz afterwards.
func TestHostileInputs(t *testing.T) {
	t.Parallel()
	se := newSecEnv(t, func(d *Deps) { d.TokenFailLimit = 10000 }) // the limit has its own test
	a, b := se.alice, se.bob
	s := login(t, se.h)
	admin, user := bearer(se.adminToken), bearer(a.token)
	withCSRF := func(v url.Values) url.Values { v.Set("csrf", s.csrf); return v }

	// Push tokens.
	good := se.fake.SignPushToken(googlefake.IDTokenClaims{})
	hdr, _ := base64.RawURLEncoding.DecodeString(strings.Split(good, ".")[0])
	var goodHeader map[string]any
	_ = json.Unmarshal(hdr, &goodHeader)
	kid, _ := goodHeader["kid"].(string)
	now := time.Now()
	claims := map[string]any{"iss": "https://accounts.google.com", "aud": pushAudience, "email": googlefake.DefaultPushServiceAccount,
		"email_verified": true, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix(), "sub": "1"}
	envelope := string(se.fake.PushEnvelope("nobody@example.com", 5))
	push := func(name, auth string, status int, code string) hostileCase {
		return hostileCase{name: "push: " + name, method: "POST", path: "/push/gmail", body: envelope,
			headers: map[string]string{"Authorization": auth}, status: status, code: code}
	}
	pushBody := func(name string, body any, status int, code string) hostileCase {
		return hostileCase{name: "push body: " + name, method: "POST", path: "/push/gmail?token=" + pushSecret, body: body, status: status, code: code}
	}
	data := func(payload string) string {
		return `{"message":{"data":"` + base64.StdEncoding.EncodeToString([]byte(payload)) + `","messageId":"1"},"subscription":"s"}`
	}
	cases := []hostileCase{
		push("no token", "", 401, "unauthorized"),
		{name: "push: wrong shared token", method: "POST", path: "/push/gmail?token=wrong", body: envelope, status: 401, code: "unauthorized"},
		{name: "push: shared token twice", method: "POST", path: "/push/gmail?token=wrong&token=" + pushSecret, body: envelope, status: 401, code: "unauthorized"},
		push("not a JWT", "Bearer abc", 401, "unauthorized"),
		push("two segments", "Bearer abc.def", 401, "unauthorized"),
		push("bad base64", "Bearer !!!.***.###", 401, "unauthorized"),
		push("alg none", "Bearer "+jwt(map[string]any{"alg": "none", "typ": "JWT"}, claims, nil), 401, "unauthorized"),
		push("alg none with kid", "Bearer "+jwt(map[string]any{"alg": "none", "kid": kid}, claims, nil), 401, "unauthorized"),
		push("HS256 with the kid", "Bearer "+jwt(map[string]any{"alg": "HS256", "kid": kid}, claims, []byte("0123456789abcdef0123456789abcdef")), 401, "unauthorized"),
		push("ES256 with a 1-byte signature", "Bearer "+jwt(map[string]any{"alg": "ES256", "kid": kid}, claims, []byte{1}), 401, "unauthorized"),
		push("ES256 with an IAP-style kid", "Bearer "+jwt(map[string]any{"alg": "ES256", "kid": "0oeLcQ"}, claims, []byte{1}), 401, "unauthorized"),
		push("RS256 without kid", "Bearer "+jwt(map[string]any{"alg": "RS256"}, claims, make([]byte, 256)), 401, "unauthorized"),
		push("RS256 unknown kid", "Bearer "+jwt(map[string]any{"alg": "RS256", "kid": "no-such-key"}, claims, make([]byte, 256)), 401, "unauthorized"),
		push("signed, unknown kid", "Bearer "+se.fake.SignPushToken(googlefake.IDTokenClaims{}, googlefake.FlawUnknownKey), 401, "unauthorized"),
		push("bad signature", "Bearer "+se.fake.SignPushToken(googlefake.IDTokenClaims{}, googlefake.FlawBadSignature), 401, "unauthorized"),
		push("bad signature, scheme in lower case", "bearer "+se.fake.SignPushToken(googlefake.IDTokenClaims{}, googlefake.FlawBadSignature), 401, "unauthorized"),
		push("scheme alone, in upper case", "BEARER", 401, "unauthorized"),
		push("token over 8 KiB", "Bearer "+strings.Repeat("a.", 5000)+"b", 401, "unauthorized"),
		push("expired", "Bearer "+se.fake.SignPushToken(googlefake.IDTokenClaims{}, googlefake.FlawExpired), 401, "unauthorized"),
		push("wrong issuer", "Bearer "+se.fake.SignPushToken(googlefake.IDTokenClaims{}, googlefake.FlawWrongIssuer), 401, "unauthorized"),
		push("issued an hour ahead", "Bearer "+se.fake.SignPushToken(googlefake.IDTokenClaims{IssuedAt: now.Add(time.Hour), Expiry: now.Add(2 * time.Hour)}), 401, "unauthorized"),
		push("huge token", "Bearer "+strings.Repeat("a", 10000), 401, "unauthorized"),
		push("wrong audience", "Bearer "+se.fake.SignPushToken(googlefake.IDTokenClaims{Audience: "https://evil.example/push"}), 403, "forbidden"),
		push("another service account", "Bearer "+se.fake.SignPushToken(googlefake.IDTokenClaims{Email: "evil@evil.iam.gserviceaccount.com"}), 403, "forbidden"),
		push("unverified email", "Bearer "+se.fake.SignPushToken(googlefake.IDTokenClaims{}, googlefake.FlawUnverifiedEmail), 403, "forbidden"),
		{name: "push: GET", method: "GET", path: "/push/gmail", status: 405, code: "method_not_allowed"},
		pushBody("empty", nil, 400, "malformed_push"),
		pushBody("not JSON", "hello", 400, "malformed_push"),
		pushBody("an array", "[1,2]", 400, "malformed_push"),
		pushBody("message a string", `{"message":"x"}`, 400, "malformed_push"),
		pushBody("data not base64", `{"message":{"data":"%%%"}}`, 400, "malformed_push"),
		pushBody("data not JSON", data("not json"), 400, "malformed_push"),
		pushBody("no email", data(`{"historyId":5}`), 400, "malformed_push"),
		pushBody("negative historyId", data(`{"emailAddress":"a@b.example","historyId":-5}`), 400, "malformed_push"),
		pushBody("historyId past uint64", data(`{"emailAddress":"a@b.example","historyId":"99999999999999999999999"}`), 400, "malformed_push"),
		pushBody("historyId a bool", data(`{"emailAddress":"a@b.example","historyId":true}`), 400, "malformed_push"),
		pushBody("invalid UTF-8", []byte("{\"message\":{\"data\":\"\xff\xfe\"}}"), 400, "malformed_push"),
		pushBody("deep nesting", strings.Repeat("[", 60000), 400, "malformed_push"),
		pushBody("over 64 KiB", `{"message":{"data":"`+strings.Repeat("A", 70<<10)+`"}}`, 413, "too_large"),

		// API: auth.
		{name: "api: no token", method: "GET", path: "/api/v1/users", status: 401, code: "unauthorized"},
		{name: "api: Basic auth", method: "GET", path: "/api/v1/users", headers: map[string]string{"Authorization": "Basic YTpi"}, status: 401, code: "unauthorized"},
		{name: "api: empty bearer", method: "GET", path: "/api/v1/users", headers: map[string]string{"Authorization": "Bearer   "}, status: 401, code: "unauthorized"},
		{name: "api: token over 512 bytes", method: "GET", path: "/api/v1/users", headers: bearer(strings.Repeat("x", 600)), status: 401, code: "unauthorized"},
		{name: "api: push token as API token", method: "GET", path: "/api/v1/users", headers: bearer(pushSecret), status: 401, code: "unauthorized"},
		{name: "api: a JWT as API token", method: "GET", path: "/api/v1/users", headers: bearer(good), status: 401, code: "unauthorized"},
		{name: "api: user token, admin endpoint", method: "GET", path: "/api/v1/queues", headers: user, status: 403, code: "forbidden"},
		{name: "api: user token, backup", method: "GET", path: "/api/v1/backup", headers: user, status: 403, code: "forbidden"},
		{name: "api: user token, make a token", method: "POST", path: "/api/v1/tokens", body: `{"name":"escalate"}`, headers: user, status: 403, code: "forbidden"},
		{name: "api: user token, dead letters", method: "GET", path: "/api/v1/deadletters", headers: user, status: 403, code: "forbidden"},
		{name: "api: cross-user account", method: "GET", path: "/api/v1/accounts/" + b.account, headers: user, status: 404, code: "not_found"},
		{name: "api: cross-user messages", method: "GET", path: "/api/v1/accounts/" + b.account + "/messages?limit=1", headers: user, status: 404, code: "not_found"},
		{name: "api: cross-user rule update", method: "PUT", path: "/api/v1/rules/" + b.rule, body: ruleBody, headers: user, status: 404, code: "not_found"},
		{name: "api: cross-user form submission", method: "POST", path: "/api/v1/forms/" + b.form + "/submissions", body: `{"answers":{"name":"x"}}`, headers: user, status: 404, code: "not_found"},
		{name: "api: cross-user connect", method: "POST", path: "/api/v1/accounts", body: `{"userId":"` + b.user + `","email":"e@gmail.example","refreshToken":"r"}`, headers: user, status: 404, code: "not_found"},
		{name: "api: form on another's account", method: "POST", path: "/api/v1/forms", body: `{"userId":"` + a.user + `","accountId":"` + b.account + `","spreadsheetId":"s","columns":["a"]}`, headers: user, status: 404, code: "not_found"},
		{name: "api: user token, userId a number", method: "POST", path: "/api/v1/accounts", body: `{"userId":5}`, headers: user, status: 400, code: "invalid_type"},
		{name: "api: user token, truncated body", method: "POST", path: "/api/v1/forms", body: `{"userId":"` + b.user, headers: user, status: 400, code: "malformed_json"},
		{name: "api: user token, userId twice", method: "POST", path: "/api/v1/accounts", body: `{"userId":"` + a.user + `","userId":"` + b.user + `","email":"e@gmail.example","refreshToken":"r"}`, headers: user, status: 404, code: "not_found"},
		{name: "api: user token, userId in another case", method: "POST", path: "/api/v1/accounts", body: `{"userId":"` + a.user + `","USERID":"` + b.user + `","email":"e@gmail.example","refreshToken":"r"}`, headers: user, status: 404, code: "not_found"},
		{name: "api: unknown method", method: "PATCH", path: "/api/v1/users", headers: admin, status: 405, code: "method_not_allowed"},

		// API: bodies.
		{name: "users: not JSON", method: "POST", path: "/api/v1/users", body: "email=x", headers: admin, status: 400, code: "malformed_json"},
		{name: "users: empty body", method: "POST", path: "/api/v1/users", body: "", headers: admin, status: 400, code: "malformed_json"},
		{name: "users: truncated", method: "POST", path: "/api/v1/users", body: `{"email":"a@b.example"`, headers: admin, status: 400, code: "malformed_json"},
		{name: "users: two values", method: "POST", path: "/api/v1/users", body: `{}{}`, headers: admin, status: 400, code: "malformed_json"},
		{name: "users: email a number", method: "POST", path: "/api/v1/users", body: `{"email":5}`, headers: admin, status: 400, code: "invalid_type"},
		{name: "users: body an array", method: "POST", path: "/api/v1/users", body: `[]`, headers: admin, status: 400, code: "invalid_type"},
		{name: "users: unknown field", method: "POST", path: "/api/v1/users", body: `{"email":"a@b.example","admin":true}`, headers: admin, status: 400, code: "unknown_field"},
		{name: "users: null", method: "POST", path: "/api/v1/users", body: `null`, headers: admin, status: 400, code: "invalid"},
		{name: "users: invalid UTF-8", method: "POST", path: "/api/v1/users", body: []byte("{\"email\":\"a\xff@b.example\"}"), headers: admin, status: 400, code: "malformed_json"},
		{name: "users: display name in email", method: "POST", path: "/api/v1/users", body: `{"email":"Eve <eve@b.example>"}`, headers: admin, status: 400, code: "invalid"},
		{name: "users: markup email", method: "POST", path: "/api/v1/users", body: `{"email":"<script>@x"}`, headers: admin, status: 400, code: "invalid"},
		{name: "users: long name", method: "POST", path: "/api/v1/users", body: `{"email":"long@b.example","name":"` + strings.Repeat("n", 300) + `"}`, headers: admin, status: 400, code: "invalid"},
		{name: "users: over 1 MiB", method: "POST", path: "/api/v1/users", body: `{"name":"` + strings.Repeat("x", 2<<20) + `"}`, headers: admin, status: 413, code: "too_large"},
		{name: "tokens: no name", method: "POST", path: "/api/v1/tokens", body: `{"name":"  "}`, headers: admin, status: 400, code: "invalid"},
		{name: "tokens: long name", method: "POST", path: "/api/v1/tokens", body: `{"name":"` + strings.Repeat("n", 101) + `"}`, headers: admin, status: 400, code: "invalid"},
		{name: "tokens: expiresIn not a duration", method: "POST", path: "/api/v1/tokens", body: `{"name":"x","expiresIn":"forever"}`, headers: admin, status: 400, code: "invalid"},
		{name: "tokens: expiresIn negative", method: "POST", path: "/api/v1/tokens", body: `{"name":"x","expiresIn":"-1h"}`, headers: admin, status: 400, code: "invalid"},
		{name: "tokens: expiresIn too long", method: "POST", path: "/api/v1/tokens", body: `{"name":"x","expiresIn":"999999h"}`, headers: admin, status: 400, code: "invalid"},
		{name: "tokens: expiresIn a number", method: "POST", path: "/api/v1/tokens", body: `{"name":"x","expiresIn":3600}`, headers: admin, status: 400, code: "invalid_type"},
		{name: "tokens: unknown user", method: "POST", path: "/api/v1/tokens", body: `{"name":"x","userId":"../../etc"}`, headers: admin, status: 404, code: "not_found"},
		{name: "tokens: delete path trick", method: "DELETE", path: "/api/v1/tokens/..%2F..%2Fx", headers: admin, status: 404, code: "not_found"},
		{name: "accounts: userId a number", method: "POST", path: "/api/v1/accounts", body: `{"userId":1}`, headers: admin, status: 400, code: "invalid_type"},
		{name: "accounts: no refresh token", method: "POST", path: "/api/v1/accounts", body: `{"userId":"` + a.user + `","email":"x@gmail.example"}`, headers: admin, status: 400, code: "invalid"},
		{name: "accounts: bad email", method: "POST", path: "/api/v1/accounts", body: `{"userId":"` + a.user + `","email":"nope","refreshToken":"r"}`, headers: admin, status: 400, code: "invalid"},
		{name: "accounts: path trick", method: "GET", path: "/api/v1/accounts/..%2F..%2Fusers", headers: admin, status: 404, code: "not_found"},
		{name: "accounts: NUL id", method: "GET", path: "/api/v1/accounts/%00", headers: admin, status: 404, code: "not_found"},
		{name: "accounts: dot-dot message id", method: "GET", path: "/api/v1/accounts/" + a.account + "/messages/..", headers: admin, status: 404, code: "not_found"},
		{name: "messages: limit 0", method: "GET", path: "/api/v1/accounts/" + a.account + "/messages?limit=0", headers: admin, status: 400, code: "invalid"},
		{name: "messages: limit huge", method: "GET", path: "/api/v1/accounts/" + a.account + "/messages?limit=1000000000000", headers: admin, status: 400, code: "invalid"},
		{name: "messages: limit a float", method: "GET", path: "/api/v1/accounts/" + a.account + "/messages?limit=1e3", headers: admin, status: 400, code: "invalid"},
		{name: "messages: unread maybe", method: "GET", path: "/api/v1/accounts/" + a.account + "/messages?unread=maybe", headers: admin, status: 400, code: "invalid"},
		{name: "messages: trashed 1", method: "GET", path: "/api/v1/accounts/" + a.account + "/messages?trashed=1", headers: admin, status: 400, code: "invalid"},
		{name: "messages: long cursor", method: "GET", path: "/api/v1/accounts/" + a.account + "/messages?cursor=" + strings.Repeat("c", 300), headers: admin, status: 400, code: "invalid"},
		{name: "messages: label invalid UTF-8", method: "GET", path: "/api/v1/accounts/" + a.account + "/messages?label=%c3%28", headers: admin, status: 400, code: "invalid"},
		{name: "messages: bad cursor", method: "GET", path: "/api/v1/accounts/" + a.account + "/messages?cursor=%ff%fe", headers: admin, status: 400, code: "invalid"},
		{name: "deadletters: limit text", method: "GET", path: "/api/v1/deadletters?limit=abc", headers: admin, status: 400, code: "invalid"},
		{name: "deadletters: limit negative", method: "GET", path: "/api/v1/deadletters?limit=-1", headers: admin, status: 400, code: "invalid"},
		{name: "deadletters: bad cursor", method: "GET", path: "/api/v1/deadletters?cursor=zz%00", headers: admin, status: 400, code: "invalid"},
		{name: "deadletters: unknown type", method: "GET", path: "/api/v1/deadletters?type=%3Cscript%3E", headers: admin, status: 400, code: "invalid"},
		{name: "deadletters: path trick", method: "GET", path: "/api/v1/deadletters/..%2F..%2Fbackup", headers: admin, status: 404, code: "not_found"},
		{name: "redrive: ids a string", method: "POST", path: "/api/v1/deadletters/redrive", body: `{"ids":"x"}`, headers: admin, status: 400, code: "invalid_type"},
		{name: "redrive: neither", method: "POST", path: "/api/v1/deadletters/redrive", body: `{}`, headers: admin, status: 400},
		{name: "rules: conditions a string", method: "POST", path: "/api/v1/users/" + a.user + "/rules", body: `{"label":"X","match":"all","conditions":"x"}`, headers: admin, status: 400},
		{name: "rules: bad regexp", method: "POST", path: "/api/v1/users/" + a.user + "/rules", body: `{"label":"X","match":"all","conditions":[{"field":"from","op":"matches","value":"("}]}`, headers: admin, status: 400, code: "invalid"},
		{name: "rules: unknown op", method: "POST", path: "/api/v1/users/" + a.user + "/rules", body: `{"label":"X","match":"all","conditions":[{"field":"from","op":"eval","value":"1"}]}`, headers: admin, status: 400, code: "invalid"},
		{name: "rules: empty label", method: "POST", path: "/api/v1/users/" + a.user + "/rules", body: `{"label":"","match":"all","conditions":[{"field":"from","op":"contains","value":"x"}]}`, headers: admin, status: 400, code: "invalid"},
		{name: "rules: invalid UTF-8 label", method: "POST", path: "/api/v1/users/" + a.user + "/rules", body: []byte("{\"label\":\"\xc3\x28\",\"match\":\"all\",\"conditions\":[{\"field\":\"from\",\"op\":\"contains\",\"value\":\"x\"}]}"), headers: admin, status: 400, code: "malformed_json"},
		{name: "rules: update not JSON", method: "PUT", path: "/api/v1/rules/" + a.rule, body: "label=X", headers: admin, status: 400},
		{name: "rules: unknown user", method: "GET", path: "/api/v1/users/..%2F" + a.user + "/rules", headers: admin, status: 404, code: "not_found"},
		{name: "forms: columns a string", method: "POST", path: "/api/v1/forms", body: `{"userId":"` + a.user + `","columns":"x"}`, headers: admin, status: 400, code: "invalid_type"},
		{name: "forms: answers an array", method: "POST", path: "/api/v1/forms/" + a.form + "/submissions", body: `{"answers":[]}`, headers: admin, status: 400, code: "invalid_type"},
		{name: "forms: unknown column", method: "POST", path: "/api/v1/forms/" + a.form + "/submissions", body: `{"answers":{"password":"x"}}`, headers: admin, status: 400},
		{name: "forms: answer an object", method: "POST", path: "/api/v1/forms/" + a.form + "/submissions", body: `{"answers":{"name":{"a":1}}}`, headers: admin, status: 400},
		{name: "forms: invalid UTF-8 answer", method: "POST", path: "/api/v1/forms/" + a.form + "/submissions", body: []byte("{\"answers\":{\"name\":\"\xff\"}}"), headers: admin, status: 400},
		{name: "forms: submission over 1 MiB", method: "POST", path: "/api/v1/forms/" + a.form + "/submissions", body: `{"answers":{"name":"` + strings.Repeat("x", 2<<20) + `"}}`, headers: admin, status: 413, code: "too_large"},
		{name: "forms: discardWaiting maybe", method: "DELETE", path: "/api/v1/forms/" + a.form + "?discardWaiting=maybe", headers: admin, status: 400, code: "invalid"},
		{name: "forms: dot-dot id", method: "GET", path: "/api/v1/forms/%2e%2e", headers: admin, status: 404, code: "not_found"},
		{name: "events: cursor of 2^64-1", method: "GET", path: "/api/v1/events?after=cur___________8", headers: user, status: 400, code: "invalid_cursor"},
		{name: "events: cursor of 2^64-1, waiting", method: "GET", path: "/api/v1/events?after=cur___________8&wait=30s", headers: admin, status: 400, code: "invalid_cursor"},
		{name: "events: cursor past the newest", method: "GET", path: "/api/v1/events?after=cur_AAABAAAAAAA", headers: user, status: 400, code: "invalid_cursor"},
		{name: "events: cursor of 7 bytes", method: "GET", path: "/api/v1/events?after=cur_AAAAAAAAAA", headers: user, status: 400, code: "invalid"},

		// Admin forms.
		{name: "admin: token form without CSRF", method: "POST", path: "/admin/tokens", body: url.Values{"name": {"x"}}, headers: s.headers(), status: 403, code: "csrf_failed"},
		{name: "admin: token form, bad expiry", method: "POST", path: "/admin/tokens", body: withCSRF(url.Values{"name": {"x"}, "expiresIn": {"soon"}}), headers: s.headers(), status: 400},
		{name: "admin: token form, long name", method: "POST", path: "/admin/tokens", body: withCSRF(url.Values{"name": {strings.Repeat("n", 200)}}), headers: s.headers(), status: 400},
		{name: "admin: token form, unknown user", method: "POST", path: "/admin/tokens", body: withCSRF(url.Values{"name": {"x"}, "userId": {"<script>"}}), headers: s.headers(), status: 404},
		{name: "admin: revoke without CSRF", method: "POST", path: "/admin/tokens/x/revoke", headers: s.headers(), status: 403, code: "csrf_failed"},
		{name: "admin: end sessions without CSRF", method: "POST", path: "/admin/sessions/end", headers: s.headers(), status: 403, code: "csrf_failed"},
		{name: "admin: rule save without CSRF", method: "POST", path: "/admin/rules/" + a.user + "/save", body: url.Values{"label": {"x"}}, headers: s.headers(), status: 403, code: "csrf_failed"},
		{name: "admin: account delete with a wrong CSRF", method: "POST", path: "/admin/accounts/" + a.account + "/delete", body: url.Values{"csrf": {"forged"}}, headers: s.headers(), status: 403, code: "csrf_failed"},
		{name: "admin: discard without CSRF", method: "POST", path: "/admin/deadletters/x/discard", headers: s.headers(), status: 403, code: "csrf_failed"},
		{name: "admin: CSRF header of another session", method: "POST", path: "/admin/forms/" + a.form + "/delete", headers: map[string]string{"Cookie": s.headers()["Cookie"], csrfHeader: "x"}, status: 403, code: "csrf_failed"},
		{name: "admin: oversized form", method: "POST", path: "/admin/tokens", body: url.Values{"name": {strings.Repeat("x", 2<<20)}}, headers: s.headers(), status: 413, code: "too_large"},
		{name: "admin: malformed form", method: "POST", path: "/admin/tokens", body: "%zz=%", headers: map[string]string{"Cookie": s.headers()["Cookie"], "Content-Type": "application/x-www-form-urlencoded"}, status: 400, code: "malformed_form"},
		{name: "admin: status.json without session", method: "GET", path: "/admin/rules/" + a.user + "/status.json", status: 401, code: "unauthorized"},
		{name: "admin: preview.json malformed", method: "POST", path: "/admin/rules/" + a.user + "/preview.json", body: "{", headers: map[string]string{"Cookie": s.headers()["Cookie"], csrfHeader: s.csrf}, status: 400, code: "malformed_json"},
		{name: "admin: login without its form", method: "POST", path: "/admin/login", body: url.Values{"password": {"x"}}, status: 403},
		{name: "admin: login oversized", method: "POST", path: "/admin/login", body: url.Values{"password": {strings.Repeat("x", 100<<10)}}, status: 413, code: "too_large"},
		{name: "admin: login malformed", method: "POST", path: "/admin/login", body: "%zz", headers: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, status: 400, code: "malformed_form"},
		{name: "admin: demo page without demo", method: "GET", path: "/admin/demo/mailbox", headers: s.headers(), status: 404},
		{name: "connect: unknown link", method: "GET", path: "/connect/cl_nope", status: 400},
		{name: "connect: unknown link's button", method: "POST", path: "/connect/cl_nope", body: url.Values{"csrf": {"x"}}, status: 400},
		{name: "connect: button oversized", method: "POST", path: "/connect/cl_nope", body: url.Values{"csrf": {strings.Repeat("x", 100<<10)}}, status: 413, code: "too_large"},
		{name: "connect: button malformed", method: "POST", path: "/connect/cl_nope", body: "%zz", headers: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, status: 400, code: "malformed_form"},
		{name: "admin: deadletter path trick", method: "GET", path: "/admin/deadletters/..%2F..%2Ftokens", headers: s.headers(), status: 404},
	}
	if len(cases) < 80 {
		t.Fatalf("only %d hostile requests", len(cases))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := request(t, se.h, c.method, c.path, c.body, c.headers)
			if w.Code >= 500 || w.Code != c.status {
				t.Fatalf("%s %s = %d, want %d; %.300s", c.method, c.path, w.Code, c.status, w.Body.String())
			}
			if strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
				if !strings.Contains(w.Body.String(), "<!doctype html>") {
					t.Error("an HTML answer that is not a page")
				}
				return
			}
			if got := apiError(t, w); c.code != "" && got.Code != c.code {
				t.Errorf("code %q, want %q (%s)", got.Code, c.code, got.Message)
			}
		})
	}

	// The OAuth callback answers a browser: every bad input is, for an
	// admin in session, a redirect to the Accounts page with an error
	// notice, and without a session (an end user's connect link), a short
	// page; never a 5xx, never the input repeated.
	for _, q := range []string{"", "?state=x", "?code=c&state=" + strings.Repeat("A", 5000), "?code=c&state=%ff%fe", "?code=c&state=" + base64.RawURLEncoding.EncodeToString([]byte("forged")),
		"?error=%3Cscript%3Ealert(1)%3C/script%3E", "?error=access_denied&state=x", "?code=" + strings.Repeat("c", 10000) + "&state=x"} {
		w := request(t, se.h, "GET", "/oauth/google/callback"+q, nil, s.headers())
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/admin/accounts" {
			t.Errorf("callback %.60s: %d %q", q, w.Code, w.Header().Get("Location"))
		}
		if w := request(t, se.h, "GET", "/oauth/google/callback"+q, nil, nil); w.Code != http.StatusBadRequest || strings.Contains(w.Body.String(), "alert(1)") || strings.Contains(w.Body.String(), "AAAA") {
			t.Errorf("callback %.60s without a session: %d %.200q", q, w.Code, w.Body.String())
		}
	}

	if w := request(t, se.h, "GET", "/healthz", nil, nil); w.Code != 200 {
		t.Errorf("healthz after the hostile requests: %d", w.Code)
	}
	t.Logf("%d hostile requests", len(cases))
}

// TestHostileLimits: what one user can make mailroom store and compute is
// bounded, each bound a clear answer. A form takes its submissions per
// window and then answers 429 rate_limited with Retry-After (whoever
// submits; another user's form is not limited); a form with its most rows
// waiting answers 409 form_backlog_full, and accepts again when they are
// gone; a short rule pattern that compiles large is a 400 naming the
// condition's value.
func TestHostileLimits(t *testing.T) {
	t.Parallel()
	var (
		mu     sync.Mutex
		offset time.Duration
	)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return time.Now().Add(offset) }
	se := newSecEnv(t, func(d *Deps) {
		b := brokertest.Embedded(t)
		sp, err := sheets.New(sheets.Config{SubmitsPerForm: 3, SubmitsPerUser: 100, MaxWaiting: 5, FlushDelay: time.Hour, Now: clock},
			sheets.Deps{DB: d.DB, Queue: d.Queue, Broker: b.Client(), Clients: noSheets{}})
		if err != nil {
			t.Fatal(err)
		}
		d.Forms = sp
	})
	a, b := se.alice, se.bob
	submit := func(form, token string) *httptest.ResponseRecorder {
		return request(t, se.h, "POST", "/api/v1/forms/"+form+"/submissions", `{"answers":{"name":"x"}}`, bearer(token))
	}
	for i := range 3 {
		if w := submit(a.form, a.token); w.Code != 202 {
			t.Fatalf("submission %d: %d %s", i, w.Code, w.Body)
		}
	}
	w := submit(a.form, a.token)
	if w.Code != 429 || apiError(t, w).Code != "rate_limited" {
		t.Fatalf("4th submission in a minute: %d %s, want 429 rate_limited", w.Code, w.Body)
	}
	if ra, err := strconv.Atoi(w.Header().Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Errorf("Retry-After %q, want 1-60 seconds", w.Header().Get("Retry-After"))
	}
	if w := submit(a.form, se.adminToken); w.Code != 429 {
		t.Errorf("the same form through an admin token: %d, want 429 (the limit is the form's)", w.Code)
	}
	if w := submit(b.form, b.token); w.Code != 202 {
		t.Fatalf("another user's form: %d %s", w.Code, w.Body)
	}

	// Alice's rows wait (the flush is an hour away). A minute on, the rate
	// limit has room again, but with 5 rows waiting the form refuses more.
	mu.Lock()
	offset = 61 * time.Second
	mu.Unlock()
	for i := range 2 {
		if w := submit(a.form, a.token); w.Code != 202 {
			t.Fatalf("submission %d of the next minute: %d %s", i, w.Code, w.Body)
		}
	}
	w = submit(a.form, a.token)
	if w.Code != 409 || apiError(t, w).Code != "form_backlog_full" {
		t.Fatalf("a 6th waiting row: %d %s, want 409 form_backlog_full", w.Code, w.Body)
	}
	var view struct {
		Buffered int `json:"buffered"`
	}
	if w := request(t, se.h, "GET", "/api/v1/forms/"+a.form, nil, bearer(a.token)); w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &view) != nil || view.Buffered != 5 {
		t.Errorf("the form after the refusal: %d %s, want its 5 rows still waiting", w.Code, w.Body)
	}

	tooCostly := `{"label":"Costly","match":"all","conditions":[{"field":"body","op":"matches","value":"(?i)(\\w+\\s?){1000}"}]}`
	w = request(t, se.h, "POST", "/api/v1/users/"+a.user+"/rules", tooCostly, bearer(a.token))
	if e := apiError(t, w); w.Code != 400 || e.Field != "conditions[0].value" {
		t.Errorf("a costly pattern: %d %+v, want 400 naming conditions[0].value", w.Code, e)
	}
}

// TestHostileWebhookURLs: a user token registering a webhook to an
// address that is not public (each form the issue found: IPv4-compatible,
// NAT64 and 6to4 forms of loopback and of the cloud metadata address,
// "this network", benchmarking, reserved, broadcast; a name that resolves
// to loopback) gets 400 naming url with "not a public address", and never
// learns what a name resolved to.
func TestHostileWebhookURLs(t *testing.T) {
	t.Parallel()
	se := newWebhooksEnv(t)
	for _, u := range []string{
		"https://[::127.0.0.1]/hook", "https://[64:ff9b::7f00:1]/hook", "https://[64:ff9b::a9fe:a9fe]/latest",
		"https://[2002:7f00:1::]/hook", "https://0.1.2.3/hook", "https://198.18.0.1/hook", "https://240.0.0.1/hook",
		"https://255.255.255.255/hook", "https://[::ffff:169.254.169.254]/latest", "https://[fd00::1]/hook",
		"https://localhost/hook", "https://localhost:8443/hook",
	} {
		w := request(t, se.h, "POST", "/api/v1/webhooks", map[string]any{"url": u}, bearer(se.alice.token))
		e := apiError(t, w)
		if w.Code != http.StatusBadRequest || e.Field != "url" || !strings.Contains(e.Message, "not a public address") {
			t.Errorf("%s: %d %+v, want 400 naming url: not a public address", u, w.Code, e)
		}
		for _, leak := range []string{"127.0.0.1", "::1", "resolves to"} {
			if strings.Contains(e.Message, leak) && !strings.Contains(u, leak) {
				t.Errorf("%s: the refusal tells %q: %s", u, leak, e.Message)
			}
		}
	}
	if w := request(t, se.h, "POST", "/api/v1/webhooks", map[string]any{"url": "https://[2606:4700::1111]/hook"}, bearer(se.alice.token)); w.Code != http.StatusCreated {
		t.Errorf("a public IPv6 receiver: %d %s", w.Code, w.Body)
	}
}
