package googlefake_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/api/gmail/v1"

	"mailroom/internal/googlefake"
)

func TestStartURLs(t *testing.T) {
	t.Parallel()
	srv := googlefake.New(googlefake.Options{})
	if srv.URL() != "" {
		t.Errorf("URL before Start = %q", srv.URL())
	}
	base, err := srv.Start()
	check(t, err)
	defer srv.Close()
	if !strings.HasPrefix(base, "http://127.0.0.1:") || !strings.HasSuffix(base, "/") || srv.URL() != base {
		t.Errorf("base = %q", base)
	}
	if srv.TokenURL() != base+"token" || srv.CertsURL() != base+"oauth2/v3/certs" || srv.AuthURL() != base+"o/oauth2/auth" {
		t.Errorf("urls: %s %s %s", srv.TokenURL(), srv.CertsURL(), srv.AuthURL())
	}
	if _, err := srv.Start(); err == nil {
		t.Error("second Start accepted")
	}
	check(t, srv.Close())
	check(t, srv.Close())
}

// TestMalformedRequests sends garbage everywhere: every answer is a 4xx in
// Google's error shape, never a 5xx or a crash.
func TestMalformedRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{MaxBodyBytes: 1024})
	tok := must[string](t)(e.srv.AccessToken(ann))
	id := must[string](t)(e.srv.Sheets.CreateSpreadsheet(ann, "x"))
	big := strings.Repeat("x", 2048)
	for _, tc := range []struct {
		method, path, body string
		want               int
	}{
		{"GET", "nowhere", "", 404},
		{"GET", "gmail/v1/users/", "", 404},
		{"GET", "gmail/v1/users/me/bogus", "", 404},
		{"PUT", "gmail/v1/users/me/profile", "", 405},
		{"GET", "gmail/v1/users/me/history", "", 400},
		{"GET", "gmail/v1/users/me/history?startHistoryId=abc", "", 400},
		{"GET", "gmail/v1/users/me/history?startHistoryId=1&historyTypes=nope", "", 400},
		{"GET", "gmail/v1/users/me/history?startHistoryId=1", "", 404},
		{"GET", "gmail/v1/users/me/history?startHistoryId=99999999&pageToken=x", "", 400},
		{"GET", "gmail/v1/users/me/messages?maxResults=-3", "", 400},
		{"GET", "gmail/v1/users/me/messages?pageToken=garbage", "", 400},
		{"POST", "gmail/v1/users/me/labels", "{not json", 400},
		{"POST", "gmail/v1/users/me/labels", `{"name":""}`, 400},
		{"POST", "gmail/v1/users/me/labels", `{"name":"` + big + `"}`, 413},
		{"POST", "gmail/v1/users/me/messages/batchModify", `{}`, 400},
		{"POST", "gmail/v1/users/me/messages/batchModify", `{"ids":"x"}`, 400},
		{"POST", "gmail/v1/users/me/watch", `{}`, 400},
		{"POST", "gmail/v1/users/me/messages/abc/modify", `[]`, 400},
		{"GET", "v4/spreadsheets/", "", 404},
		{"GET", "v4/spreadsheets/" + id + "/values/Sheet1!A0", "", 400},
		{"GET", "v4/spreadsheets/" + id + "/values/Sheet1!A1?majorDimension=DIAGONAL", "", 400},
		{"POST", "v4/spreadsheets/" + id + "/values/Sheet1!A1:append?valueInputOption=RAW", `{"values":[[{"a":1}]]}`, 400},
		{"POST", "v4/spreadsheets/" + id + "/values/Sheet1!A1:append?valueInputOption=RAW&insertDataOption=UP", `{"values":[["a"]]}`, 400},
		{"POST", "v4/spreadsheets/" + id + "/values/Sheet1!A1:frobnicate", `{}`, 405},
		{"POST", "v4/spreadsheets/" + id + "/values:batchUpdate", `{"data":[{"range":"Sheet1!A1","values":[["a"]]}]}`, 400},
		{"POST", "token", "grant_type=password", 400},
		{"POST", "token", "%%%", 400},
		{"GET", "token", "", 405},
		{"GET", "o/oauth2/auth?client_id=x", "", 400},
		{"GET", "o/oauth2/auth?client_id=x&redirect_uri=http://a.example/cb&response_type=token", "", 400},
		{"POST", "revoke", "token=unknown", 400},
	} {
		req, err := http.NewRequest(tc.method, e.base+tc.path, strings.NewReader(tc.body))
		check(t, err)
		req.Header.Set("Authorization", "Bearer "+tok)
		if tc.method == "POST" && !strings.HasPrefix(tc.path, "gmail") && !strings.HasPrefix(tc.path, "v4") {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		resp, err := e.hc.Do(req)
		check(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want || !strings.Contains(string(body), `"error"`) {
			t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, resp.StatusCode, body, tc.want)
		}
	}
}

func TestCallCountsAndReset(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{})
	_, err := e.gmail.Users.Labels.Create("me", &gmail.Label{Name: "A"}).Do()
	check(t, err)
	_, err = e.gmail.Users.Labels.List("me").Do()
	check(t, err)
	counts := e.srv.CallCounts()
	if counts[googlefake.MethodLabelsCreate] != 1 || counts[googlefake.MethodLabelsList] != 1 || counts[googlefake.MethodToken] != 1 {
		t.Errorf("counts = %v", counts)
	}
	if e.srv.Gmail.TotalQuotaUnits() != 6 {
		t.Errorf("total units = %d, want 6", e.srv.Gmail.TotalQuotaUnits())
	}
	e.srv.ResetCounters()
	if len(e.srv.CallCounts()) != 0 || e.srv.Gmail.QuotaUnits(ann) != 0 {
		t.Errorf("after reset: %v, %d units", e.srv.CallCounts(), e.srv.Gmail.QuotaUnits(ann))
	}
}
