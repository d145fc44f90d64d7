package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"
)

// ErrPrivateAddress: a webhook's host is, or resolves to, an address that
// is not public (loopback, private, link-local or another special-purpose
// block of IANA's registries: see specialBlocks), and
// MAILROOM_WEBHOOK_ALLOW_PRIVATE is off.
var ErrPrivateAddress = errors.New("webhooks: the URL reaches an address that is not public")

// checkURL validates a webhook URL as the contract says: https, or http to
// a loopback address; no user info; and, unless allowPrivate, a host that
// resolves to no blocked address. It returns a sentence for the user.
func checkURL(ctx context.Context, raw string, allowPrivate bool, resolver *net.Resolver) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" || len(raw) > 2048 {
		return errors.New("url must be an absolute https:// URL of at most 2,048 characters")
	}
	if u.User != nil {
		return errors.New("url must not carry a user name or password")
	}
	host := u.Hostname()
	switch u.Scheme {
	case "https":
	case "http":
		if !isLoopbackName(host) {
			return errors.New("url must be https://; http:// is allowed only to a loopback address (a receiver on this host)")
		}
	default:
		return errors.New("url must be https:// (or http:// to a loopback address)")
	}
	if allowPrivate {
		return nil
	}
	// One answer whether the name does not resolve or resolves to an
	// address that is not public, and never the address: what an internal
	// name resolves to, or that it exists, is not for the user to learn.
	addrs, err := resolve(ctx, resolver, host)
	if err != nil || len(addrs) == 0 || slices.ContainsFunc(addrs, func(a netip.Addr) bool { return !public(a) }) {
		return fmt.Errorf("url's host %s is not a public address (it does not resolve, or reaches a loopback, private, link-local or other special-purpose address); set MAILROOM_WEBHOOK_ALLOW_PRIVATE=true to allow a receiver on this host or network", host)
	}
	return nil
}

func isLoopbackName(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

func resolve(ctx context.Context, r *net.Resolver, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return r.LookupNetIP(ctx, "ip", host)
}

// newClient is the HTTP client deliveries use: the whole exchange within
// timeout, no redirects followed, no proxy from the environment (it would
// dial for us), and, unless allowPrivate, a dialer that refuses a blocked
// address at each connection, after the name was resolved, so a name that
// resolves differently at delivery than at creation is caught too.
func newClient(timeout time.Duration, allowPrivate bool) *http.Client {
	dialer := &net.Dialer{Timeout: timeout}
	if !allowPrivate {
		dialer.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil || !public(ap.Addr()) {
				return ErrPrivateAddress // the address is not told (see checkURL)
			}
			return nil
		}
	}
	transport := &http.Transport{
		Proxy:               nil,
		DialContext:         dialer.DialContext,
		TLSHandshakeTimeout: timeout,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   true,
	}
	return &http.Client{
		Timeout:   timeout,
		Transport: transport,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}
