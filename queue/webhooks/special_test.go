package webhooks

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// TestOnlyPublicAddresses: a webhook URL whose host is in a block of
// IANA's special-purpose registries (or outside IPv6's global unicast) is
// refused naming url, with a message that says "not a public address" and
// not the address; an IPv6 address that carries an IPv4 one (mapped,
// NAT64, 6to4, Teredo) is judged by the IPv4 address; public addresses
// are taken.
func TestOnlyPublicAddresses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	for _, c := range []struct {
		host   string
		public bool
	}{
		// The findings.
		{"[::127.0.0.1]", false},        // IPv4-compatible
		{"[64:ff9b::7f00:1]", false},    // NAT64 of 127.0.0.1
		{"[64:ff9b::a9fe:a9fe]", false}, // NAT64 of 169.254.169.254
		{"[2002:7f00:1::]", false},      // 6to4 of 127.0.0.1
		{"0.1.2.3", false},              // "this network"
		{"198.18.0.1", false},           // benchmarking
		{"240.0.0.1", false},            // reserved
		{"255.255.255.255", false},      // limited broadcast
		// The rest of the registries.
		{"127.0.0.1", false}, {"10.1.2.3", false}, {"172.16.0.1", false}, {"192.168.1.1", false},
		{"169.254.169.254", false}, {"100.64.0.1", false}, {"192.0.0.170", false}, {"192.0.2.1", false},
		{"192.88.99.1", false}, {"198.51.100.7", false}, {"203.0.113.9", false}, {"224.0.0.251", false},
		{"239.255.255.250", false}, {"[::1]", false}, {"[::]", false}, {"[::ffff:10.0.0.1]", false},
		{"[::ffff:127.0.0.1]", false}, {"[64:ff9b:1::808:808]", false}, {"[100::1]", false},
		{"[2001:2::1]", false}, {"[2001:db8::1]", false}, {"[3fff::1]", false}, {"[fc00::1]", false},
		{"[fd12:3456::1]", false}, {"[fe80::1]", false}, {"[ff02::1]", false}, {"[5f00::1]", false},
		{"[2001:0:c000:201::f7f7:f7f7]", false}, // Teredo, server 192.0.2.1
		{"[2001:0:808:808::3fff:fdd2]", false},  // Teredo, client 192.0.2.45
		{"[2002:a00:1::]", false},               // 6to4 of 10.0.0.1
		{"[4000::1]", false},                    // outside 2000::/3
		// Public.
		{"8.8.8.8", true}, {"[2606:4700::1111]", true}, {"93.184.216.34", true}, {"1.1.1.1", true},
		{"[::ffff:8.8.8.8]", true}, {"[64:ff9b::808:808]", true}, {"[2002:808:808::1]", true},
		{"[2001:0:808:808::f7f7:f7f7]", true}, // Teredo, server and client 8.8.8.8
	} {
		w, _, err := e.p.Create(context.Background(), CreateRequest{URL: "https://" + c.host + "/hook"})
		if err == nil {
			_ = e.p.Delete(w.ID) // under the per-user limit
		}
		var inv *InvalidError
		switch {
		case c.public && err != nil:
			t.Errorf("%s: %v, want it taken", c.host, err)
		case !c.public && (!errors.As(err, &inv) || inv.Field != "url" || !strings.Contains(inv.Message, "not a public address")):
			t.Errorf("%s: %v, want an invalid url that is not a public address", c.host, err)
		}
	}
}

// TestRefusalTellsNoAddress: a name that resolves to a loopback address
// is refused without saying what it resolved to, in the same words as a
// name that does not resolve (a user cannot map internal DNS).
func TestRefusalTellsNoAddress(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	msg := func(host string) string {
		_, _, err := e.p.Create(context.Background(), CreateRequest{URL: "https://" + host + "/hook"})
		var inv *InvalidError
		if !errors.As(err, &inv) || inv.Field != "url" {
			t.Fatalf("%s: %v, want an invalid url", host, err)
		}
		return inv.Message
	}
	local, none := msg("localhost"), msg("no-such-host.invalid")
	for _, leak := range []string{"127.0.0.1", "::1", "resolves to"} {
		if strings.Contains(local, leak) {
			t.Errorf("the refusal of localhost tells %q: %s", leak, local)
		}
	}
	if strings.ReplaceAll(none, "no-such-host.invalid", "localhost") != local {
		t.Errorf("a name that does not resolve and one that resolves to loopback get different answers:\n%s\n%s", none, local)
	}
}

// TestSpecialBlocksMostSpecific: nested blocks are decided by the most
// specific one, so every block with an embedded IPv4 address is reached.
func TestSpecialBlocksMostSpecific(t *testing.T) {
	t.Parallel()
	for _, b := range specialBlocks {
		got, ok := specialBlockOf(b.prefix.Addr())
		if !ok || got.prefix != b.prefix && got.prefix.Bits() <= b.prefix.Bits() {
			t.Errorf("%s (%s): decided by %s", b.prefix, b.entry, got.prefix)
		}
	}
	if public(netip.Addr{}) {
		t.Error("the zero address is public")
	}
}
