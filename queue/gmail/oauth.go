package gmail

// OAuthConfigured reports whether accounts can be connected through
// Google's consent page. The consent round trip itself (the admin page's
// connect and the API's connect links) is the accounts service's
// (queue/google/accounts, connect.go); it ends in Connect.
func (p *Pipeline) OAuthConfigured() bool { return p.google.OAuthConfigured() }
