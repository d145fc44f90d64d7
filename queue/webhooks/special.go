package webhooks

import (
	"net/netip"
)

// specialBlock is one entry of IANA's special-purpose address registries
// (iana-ipv4-special-registry, iana-ipv6-special-registry) or of their
// address-space registries (iana-ipv4-address-space, ipv6-address-space)
// that a webhook may not reach. A block that carries an IPv4 address
// (IPv4-mapped, NAT64, 6to4, Teredo) has embedded set: such an address is
// public only when every IPv4 address it carries is.
type specialBlock struct {
	prefix   netip.Prefix
	entry    string // the registry's name for the block, and its RFC
	embedded func(netip.Addr) []netip.Addr
}

// specialBlocks are the blocks, as in the registries. Where blocks nest
// (Teredo 2001::/32 in 2001::/23), the most specific one decides.
var specialBlocks = []specialBlock{
	// iana-ipv4-special-registry
	{prefix: netip.MustParsePrefix("0.0.0.0/8"), entry: `"This network" (RFC 791)`},
	{prefix: netip.MustParsePrefix("10.0.0.0/8"), entry: "Private-Use (RFC 1918)"},
	{prefix: netip.MustParsePrefix("100.64.0.0/10"), entry: "Shared Address Space (RFC 6598)"},
	{prefix: netip.MustParsePrefix("127.0.0.0/8"), entry: "Loopback (RFC 1122)"},
	{prefix: netip.MustParsePrefix("169.254.0.0/16"), entry: "Link Local (RFC 3927)"},
	{prefix: netip.MustParsePrefix("172.16.0.0/12"), entry: "Private-Use (RFC 1918)"},
	{prefix: netip.MustParsePrefix("192.0.0.0/24"), entry: "IETF Protocol Assignments (RFC 6890)"},
	{prefix: netip.MustParsePrefix("192.0.2.0/24"), entry: "Documentation, TEST-NET-1 (RFC 5737)"},
	{prefix: netip.MustParsePrefix("192.88.99.0/24"), entry: "Deprecated (6to4 Relay Anycast) (RFC 7526)"},
	{prefix: netip.MustParsePrefix("192.168.0.0/16"), entry: "Private-Use (RFC 1918)"},
	{prefix: netip.MustParsePrefix("198.18.0.0/15"), entry: "Benchmarking (RFC 2544)"},
	{prefix: netip.MustParsePrefix("198.51.100.0/24"), entry: "Documentation, TEST-NET-2 (RFC 5737)"},
	{prefix: netip.MustParsePrefix("203.0.113.0/24"), entry: "Documentation, TEST-NET-3 (RFC 5737)"},
	{prefix: netip.MustParsePrefix("240.0.0.0/4"), entry: "Reserved (RFC 1112)"},
	{prefix: netip.MustParsePrefix("255.255.255.255/32"), entry: `"Limited Broadcast" (RFC 919)`},
	// iana-ipv4-address-space
	{prefix: netip.MustParsePrefix("224.0.0.0/4"), entry: "Multicast (RFC 5771)"},

	// iana-ipv6-special-registry
	{prefix: netip.MustParsePrefix("::1/128"), entry: "Loopback Address (RFC 4291)"},
	{prefix: netip.MustParsePrefix("::/128"), entry: "Unspecified Address (RFC 4291)"},
	{prefix: netip.MustParsePrefix("::ffff:0:0/96"), entry: "IPv4-mapped Address (RFC 4291)", embedded: lastFour},
	{prefix: netip.MustParsePrefix("64:ff9b::/96"), entry: "IPv4-IPv6 Translat. (RFC 6052)", embedded: lastFour},
	{prefix: netip.MustParsePrefix("64:ff9b:1::/48"), entry: "IPv4-IPv6 Translat., local-use (RFC 8215)"},
	{prefix: netip.MustParsePrefix("100::/64"), entry: "Discard-Only Address Block (RFC 6666)"},
	{prefix: netip.MustParsePrefix("100:0:0:1::/64"), entry: "Dummy IPv6 Prefix (RFC 9780)"},
	{prefix: netip.MustParsePrefix("2001::/23"), entry: "IETF Protocol Assignments (RFC 2928)"},
	{prefix: netip.MustParsePrefix("2001::/32"), entry: "TEREDO (RFC 4380)", embedded: teredo},
	{prefix: netip.MustParsePrefix("2001:db8::/32"), entry: "Documentation (RFC 3849)"},
	{prefix: netip.MustParsePrefix("2002::/16"), entry: "6to4 (RFC 3056)", embedded: sixToFour},
	{prefix: netip.MustParsePrefix("3fff::/20"), entry: "Documentation (RFC 9637)"},
	{prefix: netip.MustParsePrefix("5f00::/16"), entry: "Segment Routing (SRv6) SIDs (RFC 9602)"},
	{prefix: netip.MustParsePrefix("fc00::/7"), entry: "Unique-Local (RFC 4193)"},
	{prefix: netip.MustParsePrefix("fe80::/10"), entry: "Link-Local Unicast (RFC 4291)"},
	// ipv6-address-space: all but 2000::/3 is reserved by the IETF or
	// kept for special uses; ::/96 holds the deprecated IPv4-compatible
	// addresses (RFC 4291), which reach nothing a receiver listens on.
	{prefix: netip.MustParsePrefix("::/96"), entry: "IPv4-compatible Address, deprecated (RFC 4291)"},
	{prefix: netip.MustParsePrefix("::/3"), entry: "Reserved by IETF, outside Global Unicast 2000::/3 (RFC 4291)"},
	{prefix: netip.MustParsePrefix("4000::/2"), entry: "Reserved by IETF, outside Global Unicast 2000::/3 (RFC 4291)"},
	{prefix: netip.MustParsePrefix("8000::/1"), entry: "Reserved by IETF, outside Global Unicast 2000::/3 (RFC 4291)"},
	{prefix: netip.MustParsePrefix("ff00::/8"), entry: "Multicast (RFC 4291)"},
}

// specialBlockOf returns the most specific block that holds a, if any.
func specialBlockOf(a netip.Addr) (specialBlock, bool) {
	var found specialBlock
	ok := false
	for _, b := range specialBlocks {
		if b.prefix.Contains(a) && (!ok || b.prefix.Bits() > found.prefix.Bits()) {
			found, ok = b, true
		}
	}
	return found, ok
}

// public reports whether a webhook may reach a: an address in no special
// block, or one that carries only public IPv4 addresses.
func public(a netip.Addr) bool {
	if !a.IsValid() {
		return false
	}
	b, ok := specialBlockOf(a.WithZone(""))
	if !ok {
		return true
	}
	if b.embedded == nil {
		return false
	}
	for _, v4 := range b.embedded(a) {
		if !v4.Is4() || !public(v4) {
			return false
		}
	}
	return true
}

// lastFour is the IPv4 address in an address's last 32 bits
// (IPv4-mapped, and NAT64's well-known prefix, RFC 6052 section 2.2).
func lastFour(a netip.Addr) []netip.Addr {
	b := a.As16()
	return []netip.Addr{netip.AddrFrom4([4]byte(b[12:16]))}
}

// sixToFour is the 6to4 router's IPv4 address, in bits 16-47 (RFC 3056).
func sixToFour(a netip.Addr) []netip.Addr {
	b := a.As16()
	return []netip.Addr{netip.AddrFrom4([4]byte(b[2:6]))}
}

// teredo is a Teredo address's server IPv4 address (bits 32-63) and its
// client's, obfuscated in the last 32 bits (RFC 4380 section 4).
func teredo(a netip.Addr) []netip.Addr {
	b := a.As16()
	client := [4]byte{^b[12], ^b[13], ^b[14], ^b[15]}
	return []netip.Addr{netip.AddrFrom4([4]byte(b[4:8])), netip.AddrFrom4(client)}
}
