package googlefake_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/oauth2"
	"google.golang.org/api/gmail/v1"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"
	"google.golang.org/api/sheets/v4"

	"mailroom/internal/googlefake"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// net/http's server lingers up to 500 ms on a connection it closes
		// after an answer (so the client reads it before a reset), past the
		// test server's Close: not a goroutine of ours.
		goleak.IgnoreAnyFunction("net/http.(*conn).closeWriteAndWait"))
}

const (
	ann = "ann@example.com"
	bob = "bob@example.com"
)

// env is one started emulator with an account and official clients.
type env struct {
	srv     *googlefake.Server
	base    string
	refresh string
	gmail   *gmail.Service
	sheets  *sheets.Service
	hc      *http.Client // plain client for raw requests, closed with the test
}

// newEnv starts an emulator with the account ann and clients for it that
// refresh their token at the emulator's token endpoint, as production does.
func newEnv(t *testing.T, opts googlefake.Options) *env {
	t.Helper()
	srv := googlefake.StartForTest(t, opts)
	e := &env{srv: srv, base: srv.URL(), refresh: srv.AddAccount(ann)}
	e.hc = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	t.Cleanup(e.hc.CloseIdleConnections)
	e.gmail, e.sheets = e.clients(t, e.refresh)
	return e
}

// tokenSource returns an x/oauth2 token source for a refresh token, with
// its own HTTP client (x/oauth2 refreshes under the context the source was
// made with, through the oauth2.HTTPClient it carries, not the call's).
func (e *env) tokenSource(t *testing.T, refresh string) oauth2.TokenSource {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, &http.Client{Timeout: 5 * time.Second, Transport: tr})
	conf := &oauth2.Config{
		ClientID: "client-id", ClientSecret: "client-secret",
		Endpoint: oauth2.Endpoint{TokenURL: e.srv.TokenURL(), AuthURL: e.srv.AuthURL()},
	}
	return conf.TokenSource(ctx, &oauth2.Token{RefreshToken: refresh})
}

// clients returns official Gmail and Sheets clients for a refresh token,
// built as production builds them (WithEndpoint and WithTokenSource).
func (e *env) clients(t *testing.T, refresh string) (*gmail.Service, *sheets.Service) {
	t.Helper()
	ctx := context.Background()
	ts := e.tokenSource(t, refresh)
	g, err := gmail.NewService(ctx, option.WithEndpoint(e.base), option.WithTokenSource(ts))
	if err != nil {
		t.Fatal(err)
	}
	s, err := sheets.NewService(ctx, option.WithEndpoint(e.base), option.WithTokenSource(ts))
	if err != nil {
		t.Fatal(err)
	}
	return g, s
}

// apiCode returns the HTTP code and first reason of a googleapi error.
func apiCode(t *testing.T, err error) (int, string) {
	t.Helper()
	var gerr *googleapi.Error
	if !errors.As(err, &gerr) {
		t.Fatalf("want a *googleapi.Error, got %T: %v", err, err)
	}
	reason := ""
	if len(gerr.Errors) > 0 {
		reason = gerr.Errors[0].Reason
	}
	return gerr.Code, reason
}

func must[T any](t *testing.T) func(v T, err error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// clock is a settable test clock.
type clock struct {
	ch chan time.Time // a one-slot mutex holding the time
}

func newClock(t time.Time) *clock {
	c := &clock{ch: make(chan time.Time, 1)}
	c.ch <- t
	return c
}

func (c *clock) Now() time.Time {
	t := <-c.ch
	c.ch <- t
	return t
}

func (c *clock) Advance(d time.Duration) {
	t := <-c.ch
	c.ch <- t.Add(d)
}

// staticGmail returns a Gmail client using a fixed access token.
func staticGmail(tb testing.TB, base, access string) *gmail.Service {
	tb.Helper()
	svc, err := gmail.NewService(context.Background(), option.WithEndpoint(base),
		option.WithTokenSource(oauth2.StaticTokenSource(&oauth2.Token{AccessToken: access})))
	if err != nil {
		tb.Fatal(err)
	}
	return svc
}
