// Package docs holds mailroom's documentation (Markdown, read on GitHub or in
// a checkout); it has no code. Its test checks that every relative link and
// anchor in README.md and docs/ leads somewhere.
package docs
