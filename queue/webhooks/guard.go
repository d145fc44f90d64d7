package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// ErrPrivateAddress: a webhook's host is, or resolves to, a loopback,
// private or link-local address, and MAILROOM_WEBHOOK_ALLOW_PRIVATE is off.
var ErrPrivateAddress = errors.New("webhooks: the URL reaches a loopback, private or link-local address")

// cgnat is the shared address space of carrier-grade NAT (RFC 6598),
// private in all but name.
var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// blocked reports whether an address is one a webhook may not reach
// without MAILROOM_WEBHOOK_ALLOW_PRIVATE.
func blocked(a netip.Addr) bool {
	a = a.Unmap()
	return !a.IsValid() || a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() || cgnat.Contains(a)
}

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
	addrs, err := resolve(ctx, resolver, host)
	if err != nil {
		return fmt.Errorf("url's host %s does not resolve: %w", host, err)
	}
	for _, a := range addrs {
		if blocked(a) {
			return fmt.Errorf("url's host %s resolves to %s, a loopback, private or link-local address; set MAILROOM_WEBHOOK_ALLOW_PRIVATE=true to allow a receiver on this host or network", host, a)
		}
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
			if err != nil {
				return fmt.Errorf("%w: %s", ErrPrivateAddress, address)
			}
			if blocked(ap.Addr()) {
				return fmt.Errorf("%w: %s", ErrPrivateAddress, ap.Addr())
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
