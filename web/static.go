package web

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
)

// staticFiles serves the embedded static folder. Each file is linked as
// /static/NAME?v=HASH (the "asset" template function): a request carrying
// the current hash may be cached for a year; any other for five minutes,
// revalidated by ETag.
type staticFiles struct {
	files map[string]staticFile
}

type staticFile struct {
	body  []byte
	hash  string
	ctype string
}

func newStaticFiles(fsys fs.FS) (*staticFiles, error) {
	sf := &staticFiles{files: map[string]staticFile{}}
	err := fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		ctype := mime.TypeByExtension(path.Ext(name))
		if ctype == "" {
			ctype = http.DetectContentType(body)
		}
		sf.files[name] = staticFile{body: body, hash: hex.EncodeToString(sum[:6]), ctype: ctype}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("web: read static files: %w", err)
	}
	return sf, nil
}

// url is the cache-busting link to a static file.
func (sf *staticFiles) url(name string) (string, error) {
	f, ok := sf.files[name]
	if !ok {
		return "", fmt.Errorf("no static file %q", name)
	}
	return "/static/" + name + "?v=" + f.hash, nil
}

func (s *server) serveStatic(c *gin.Context) {
	name := strings.TrimPrefix(c.Param("filepath"), "/")
	f, ok := s.static.files[name]
	if !ok {
		s.fail(c, notFound("There is no such static file."))
		return
	}
	if c.Query("v") == f.hash {
		c.Header("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		c.Header("Cache-Control", "public, max-age=300")
	}
	c.Header("ETag", `"`+f.hash+`"`)
	c.Header("Content-Type", f.ctype)
	http.ServeContent(c.Writer, c.Request, name, time.Time{}, bytes.NewReader(f.body))
}
