package google

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// RevokeURL is the revocation endpoint Revoke posts to.
func (c *Client) RevokeURL() string { return c.cfg.RevokeURL }

// RevokeError is Google refusing a revocation: its status and OAuth error.
type RevokeError struct {
	Status      int
	Code        string // OAuth "error", such as invalid_token
	Description string
}

func (e *RevokeError) Error() string {
	msg := fmt.Sprintf("google: revoke: HTTP %d", e.Status)
	if e.Code != "" {
		msg += " " + e.Code
	}
	if e.Description != "" {
		msg += ": " + e.Description
	}
	return msg
}

// Revoke ends the grant behind tok at Google's revocation endpoint (the
// refresh token if it has one, else the access token): the token and every
// token of its grant stop working. A refusal is a *RevokeError.
func (c *Client) Revoke(ctx context.Context, tok Token) error {
	t := tok.RefreshToken
	if t == "" {
		t = tok.AccessToken
	}
	if t == "" {
		return fmt.Errorf("google: revoke: no token to revoke")
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RefreshTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.RevokeURL, strings.NewReader(url.Values{"token": {t}}.Encode()))
	if err != nil {
		return fmt.Errorf("google: revoke: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.hc.Do(req)
	if err != nil {
		// The URL error quotes the endpoint only; the token is in the body.
		return fmt.Errorf("google: revoke: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	e := &RevokeError{Status: resp.StatusCode}
	var oe struct {
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	if json.Unmarshal(body, &oe) == nil {
		e.Code, e.Description = oe.Error, oe.Description
	}
	return e
}
