// # Gmail fidelity
//
// The Gmail emulator's quota is at least as strict as Google's documents
// on what mailroom relies on, and answers a refusal in each shape Google
// has been seen to use, so that mailroom is tested against what it meets
// in the field and not only against what the documents say. Each
// behaviour, the document or public report it comes from, and the test
// that proves it with the official client (google.golang.org/api/gmail/v1):
//
//	behaviour                                     | Google's document                                        | test
//	----------------------------------------------|----------------------------------------------------------|--------------------------------------
//	each method costs its quota units, by the     | reference/quota ("Per-method quota usage"), May 2026     | TestGmailQuotaDefaultsAndTable
//	  price list (Options.GmailQuotaPrices,       |   revision: messages.get/attachments.get/trash 20 from   |   (both lists), TestGmail-
//	  SetQuotaPrices). 2026 (the default):        |   Google's own page in its Japanese and Chinese copies;  |   SetQuotaPrices,
//	  messages.get 20, messages.trash 20,         |   threads.get 40 (and threads.list, watch, stop) are     |   TestGmailQuotaMethodCosts
//	  threads.get 40; 2025: messages.get and      |   SECONDARY: public write-ups quoting the English page   |
//	  trash 5, threads.get 10. Both: getProfile   |   (Nylas's "Gmail API quotas" cookbook, May 2026), not   |
//	  1, watch 100, stop 50, messages.list/       |   Google's page itself. The 2025 list: the table before  |
//	  modify/untrash 5, batchModify 50,           |   that revision, which projects that used the API from   |
//	  messages.delete 10, history.list 2,         |   November 2025 to April 2026 keep ("continue with their |
//	  labels.list/get 1, labels.create 5          |   previously set usage quotas"). messages.untrash and    |
//	                                              |   delete are in neither new source: kept at 5 and 10     |
//	a body read costs 60 under the 2026 list:     | a later copy of reference/quota prices messages.get "20  | TestGmailQuotaDefaultsAndTable
//	  messages.get with format full (the          |   (60 if format is full, raw or html)"; the first copy   |
//	  format's default), raw or html              |   says 20 for any format: the emulator takes the         |
//	                                              |   STRICTER reading (60), as mailroom's budget does       |
//	6,000 units per user per minute under the     | reference/quota (per user rate limit,                    | TestGmailQuotaDefaultsAndTable,
//	  2026 list, 15,000 under 2025's              |   userRateLimitExceeded; the lower limit for projects    | TestGmailUserQuota
//	  (Options.GmailUserUnitsPerMinute: zero      |   created since May 2026)                                |
//	  follows the list)                           |                                                          |
//	1,200,000 units per project per minute, all   | reference/quota (per project rate limit,                 | TestGmailQuotaDefaultsAndTable,
//	  users together                              |   rateLimitExceeded)                                     | TestGmailProjectQuota
//	the minute is a sliding log of every counted  | reference/quota does not say how the minute is measured: | TestGmailUserQuota,
//	  call                                        |   a sliding window is at least as strict as any fixed one| TestGmailPeakProjectUnits
//	a refused call costs nothing                  | reference/quota prices the methods, not refusals; the    | TestGmailUserQuota,
//	                                              |   lenient reading (Sheets' limits page counts refused    | TestGmailUserRefusalShapes
//	                                              |   requests: see doc_sheets.go), kept as mailroom's budget|
//	                                              |   charges a refused call's units anyway                  |
//	per user, documented shape (the default):     | guides/handle-errors and reference/quota                 | TestGmailUserQuota,
//	  403 userRateLimitExceeded in usageLimits,   |   (userRateLimitExceeded); the message as Gmail words it | TestGmailUserRefusalShapes,
//	  "User-rate limit exceeded.  Retry after     |   (levz0r/gmail-tester issue 23, bettergov/foiamail      | TestBudgetRefusalShapes (queue/
//	  <time>", the time the window frees          |   issue 36)                                              |   google)
//	per user, field shape: 403 rateLimitExceeded  | elie222/inbox-zero issue 480; mxngls/gmail-cleaner issue | TestGmailUserRefusalShapes,
//	  in usageLimits, "Quota exceeded for quota   |   5 (its second answer, with domain and reason);         | TestBudgetRefusalShapes,
//	  metric 'Queries' and limit 'Queries per     |   GAM-team/got-your-back issue 309                       | TestOneAccountRefusedLeaves-
//	  minute per user' of service 'gmail.         |                                                          |   TheOthersAlone (internal/app)
//	  googleapis.com' for consumer 'project_      |                                                          |
//	  number:…'." (SetUserRefusal)                |                                                          |
//	per user, field shape: 403 rateLimitExceeded  | taers232c/GAMADV-XTD3 issues 337 and 375 (GAM prints     | TestGmailUserRefusalShapes,
//	  in usageLimits, "User-rate limit exceeded.  |   "rateLimitExceeded - User-rate limit exceeded.  Retry  | TestBudgetRefusalShapes
//	  Retry after <time>" (SetUserRefusal)        |   after …"; the domain is not shown there: usageLimits,  |
//	                                              |   as Gmail's other quota 403s)                           |
//	per user, field shape naming no scope: 429    | mxngls/gmail-cleaner issue 5 (its first answer, domain   | TestGmailUserRefusalShapes,
//	  RESOURCE_EXHAUSTED, rateLimitExceeded in    |   global); elie222/inbox-zero issue 379 (the whole body, | TestBudgetRefusalShapes
//	  global, "Resource has been exhausted (e.g.  |   status RESOURCE_EXHAUSTED)                             |
//	  check quota)." (SetUserRefusal)             |                                                          |
//	which shape a user over its minute gets is a  | the reports above show Google using several for the same | TestGmailUserRefusalShapes
//	  choice (SetUserRefusal), not one shape      |   limit; postalsys/emailengine issue 426 reports one     |
//	                                              |   account's bulk messages.get over the per-user limit    |
//	                                              |   (the stored report does not quote the answer's body)   |
//	per project: 403 rateLimitExceeded in         | reference/quota (rateLimitExceeded); the body as Google  | TestGmailProjectQuota,
//	  usageLimits, "Rate Limit Exceeded" (names   |   answers a project forced over its limit (Stack         | TestBudgetRefusalShapes
//	  no scope in its words)                      |   Overflow, "Gmail API Global Per Second Rate Limit")    |
//	too many requests of one user in flight (20,  | guides/handle-errors (the per-user concurrent request    | TestGmailConcurrentRequests
//	  Options.GmailMaxConcurrent): 429            |   limit, 429; its number is not documented: 20 errs on   |
//	  RESOURCE_EXHAUSTED, rateLimitExceeded in    |   the strict side); the message: elie222/inbox-zero      |
//	  usageLimits, "Too many concurrent requests  |   issue 1880, taers232c/GAMADV-XTD3 issue 149            |
//	  for user"                                   |                                                          |
//	every shape above can be injected as a fault  | the same reports                                         | TestFaultRefusalShapes
//	  (Fault.Refusal) with its Retry-After and    |                                                          |
//	  the time its message names                  |                                                          |
//
// Test controls: Gmail.SetQuota (limits, window, calls in flight),
// Gmail.SetUserRefusal (the per-user refusal's shape), Fault.Refusal,
// and the counters QuotaUnits, QuotaUnitsByMethod, QuotaRefusals (by the
// limit refused, whatever the shape), QuotaWindow and PeakProjectUnits. A
// refusal injected as a fault comes after the quota has admitted the call,
// so the emulator counts that call's units; only its own refusals cost
// nothing.
package googlefake
