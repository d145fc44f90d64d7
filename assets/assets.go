// Package assets embeds the admin page's templates and static files, so the
// binary carries them and nothing needs a build step.
//
// templates/ holds html/template files. A file whose name starts with "_" is
// shared (the layout and partials); every other *.html file is one page,
// named by its file name without ".html", and defines at least "content"
// (and usually "title"). Adding a page is adding a file: the web package
// parses every file at start-up and refuses to start on a parse error.
//
// static/ holds hand-written CSS, JavaScript and images, served under
// /static/ with cache headers.
package assets

import (
	"embed"
	"io/fs"
)

//go:embed all:templates static
var files embed.FS

// Templates returns the templates folder.
func Templates() fs.FS { return sub("templates") }

// Static returns the static files folder.
func Static() fs.FS { return sub("static") }

func sub(dir string) fs.FS {
	f, err := fs.Sub(files, dir)
	if err != nil {
		panic(err) // the folder is embedded above: a programmer error
	}
	return f
}

//go:embed api/openapi.yaml
var openAPI []byte

// OpenAPI returns the OpenAPI 3.1 description of /api/v1, as YAML (the web
// package serves it as JSON).
func OpenAPI() []byte { return openAPI }
