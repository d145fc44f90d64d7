package webtest

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
)

var csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// SignIn posts the admin login form as a browser does: it opens the login
// page (with header, which may name the client through X-Forwarded-For),
// takes the pre-session cookie and the form's CSRF token, and posts form
// with them. The caller closes the answer's body.
func SignIn(c *http.Client, baseURL string, form url.Values, header http.Header) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, baseURL+"/admin/login", nil)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	m := csrfInput.FindSubmatch(page)
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if strings.HasSuffix(ck.Name, "mailroom_login") {
			cookie = ck
		}
	}
	if m == nil || cookie == nil {
		return nil, fmt.Errorf("webtest: the login page (%s) has no CSRF token or pre-session cookie", resp.Status)
	}
	f := url.Values{"csrf": {string(m[1])}}
	for k, v := range form {
		f[k] = v
	}
	req, err = http.NewRequest(http.MethodPost, baseURL+"/admin/login", strings.NewReader(f.Encode()))
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if c.Jar == nil {
		req.AddCookie(cookie)
	}
	return c.Do(req)
}
