package googlefake

// # OAuth fidelity
//
// The authorization and token endpoints follow Google's "Using OAuth 2.0
// for Web Server Applications" (developers.google.com/identity/protocols/
// oauth2/web-server), on what mailroom relies on:
//
//	behaviour                                          | the document says                                           | test
//	---------------------------------------------------|-------------------------------------------------------------|------------------------------------
//	client_id required and known (401 invalid_client); | step 1 "client_id: Required"; redirect_uri "must exactly    | TestAuthorizationEndpointChecks
//	  redirect_uri exactly one of Options.RedirectURIs |   match one of the authorized redirect URIs" else           |
//	  (400 redirect_uri_mismatch); both shown, not     |   redirect_uri_mismatch                                     |
//	  redirected                                       |                                                             |
//	response_type=code and scope required; unknown     | "response_type: Required ... code"; "scope: Required"       | TestAuthorizationEndpointChecks
//	  scope: invalid_scope                             |   (invalid_scope among the errors)                          |
//	access_type online (default) or offline; only      | "access_type: Recommended ... offline ... return a refresh  | TestAuthorizationEndpointChecks
//	  offline gets a refresh token at the exchange     |   token ... the first time"                                 |
//	code_challenge with S256 or plain (the default),   | "code_challenge_method ... S256 or plain"; RFC 7636 4.1-4.2 | TestAuthorizationEndpointChecks,
//	  43-128 unreserved characters; the code then      |   (43-128 characters); the token endpoint's code_verifier   |   TestConsentPKCE
//	  needs the matching code_verifier (invalid_grant) |                                                             |
//	refused consent: redirect with error=access_denied | "Handle the OAuth 2.0 server response": error=access_denied | TestAuthorizationEndpointChecks
//	  and the state (DenyConsent)                      |                                                             |
//	a code is used once, redirect_uri must match the   | step 5 "Exchange authorization code"                        | TestConsentFlow
//	  consent's (redirect_uri_mismatch)                |                                                             |
//	the consenting account: the login_hint when known, | "login_hint: Optional" (a hint: the person may sign in as   | TestAuthorizationEndpointChecks
//	  or who the test says (SetConsentAs)              |   another account)                                          |
//	revoke: POST token= (refresh or access); its grant | "Revoking a token": POST https://oauth2.googleapis.com/     | TestRevokeEndpoint
//	  stops refreshing; an unknown or revoked token    |   revoke?token=...; 200 on success, 400 on error            |
//	  answers 400 invalid_token; each success is kept  |                                                             |
//	  for the test (Revocations)                       |                                                             |
//
// Test controls: SetConsentAccount, SetConsentAs, DenyConsent, LastConsent,
// RevokeRefreshToken (invalid_grant at refresh), Revocations and
// Options.RedirectURIs.
