package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
)

// maxBodyBytes is the request body limit unless a route says otherwise.
const maxBodyBytes = 1 << 20

// bindJSON decodes the request body, at most maxBodyBytes, into v (a
// pointer). The body must be one JSON value with no unknown fields. The
// error it returns is an *httpError ready for fail: 413 too_large when the body
// is over the limit, 400 malformed_json, unknown_field or invalid_type
// naming the field where it can.
func bindJSON(c *gin.Context, v any) error {
	return bindJSONLimit(c, v, maxBodyBytes)
}

// bindJSONLimit is bindJSON with another limit (the push endpoint: 64 KiB).
func bindJSONLimit(c *gin.Context, v any, limit int64) error {
	if c.Request.Body == nil {
		return decodeJSON(strings.NewReader(""), v, limit)
	}
	if c.Request.ContentLength > limit {
		// Declared too large: refuse before reading, whatever it holds.
		return tooLarge(limit)
	}
	// Read it all first, so that an oversized body is 413 whatever it
	// holds, even when it is not JSON and its length was not declared.
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, limit))
	if err != nil {
		return jsonError(err, limit)
	}
	// JSON is UTF-8; Go's decoder would quietly turn bad bytes into U+FFFD
	// and store them.
	if !utf8.Valid(body) {
		return &httpError{Status: http.StatusBadRequest, Code: "malformed_json", Message: "The request body is not valid UTF-8."}
	}
	return decodeJSON(bytes.NewReader(body), v, limit)
}

// decodeJSON is bindJSON's decoding, apart from HTTP (fuzzed).
func decodeJSON(r io.Reader, v any, limit int64) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, limit)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return tooLarge(limit)
		}
		return &httpError{Status: http.StatusBadRequest, Code: "malformed_json", Message: "The request body must hold exactly one JSON value; there is more after it."}
	}
	return nil
}

func jsonError(err error, limit int64) error {
	var (
		syntax  *json.SyntaxError
		typ     *json.UnmarshalTypeError
		tooBig  *http.MaxBytesError
		invalid *json.InvalidUnmarshalError
		bad     = func(code, msg, field string) error {
			return &httpError{Status: http.StatusBadRequest, Code: code, Message: msg, Field: field}
		}
	)
	switch {
	case errors.As(err, &tooBig):
		return tooLarge(limit)
	case errors.As(err, &invalid):
		// A programmer error: the handler passed a non-pointer.
		return &httpError{Status: http.StatusInternalServerError, Code: "internal", Message: "Something went wrong on our side; the error is logged.", Err: err}
	case errors.Is(err, io.EOF):
		return bad("malformed_json", "The request body is empty; send a JSON object.", "")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return bad("malformed_json", "The request body ends in the middle of a JSON value.", "")
	case errors.As(err, &syntax):
		return bad("malformed_json", fmt.Sprintf("The request body is not valid JSON: %s (at byte %d).", syntax.Error(), syntax.Offset), "")
	case errors.As(err, &typ):
		if typ.Field == "" {
			return bad("invalid_type", fmt.Sprintf("The request body must be %s, not %s.", jsonKind(typ.Type), typ.Value), "")
		}
		return bad("invalid_type", fmt.Sprintf("%s must be %s, not %s.", typ.Field, jsonKind(typ.Type), typ.Value), typ.Field)
	}
	if name, ok := strings.CutPrefix(err.Error(), `json: unknown field "`); ok {
		name = strings.TrimSuffix(name, `"`)
		return bad("unknown_field", fmt.Sprintf("The field %q is not known here.", name), name)
	}
	return bad("malformed_json", "The request body could not be read as JSON: "+err.Error(), "")
}

// jsonKind names the JSON kind a Go type takes, with an article.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "a JSON value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "a whole number in range"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a JSON value"
}
