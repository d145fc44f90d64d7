package web

import (
	"errors"
	"net/http"
	"net/mail"
	"strings"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"mailroom/store"
)

type userJSON struct {
	ID    string `json:"id"`
	Email string `json:"email"`
	Name  string `json:"name"`
}

func toUserJSON(u store.User) userJSON { return userJSON{ID: u.ID, Email: u.Email, Name: u.Name} }

type createUserRequest struct {
	Email string `json:"email"`
	Name  string `json:"name"`
}

func (r *createUserRequest) validate() error {
	r.Email, r.Name = strings.TrimSpace(r.Email), strings.TrimSpace(r.Name)
	if r.Email == "" {
		return invalid("email", "email is required.")
	}
	if err := validEmail(r.Email); err != nil {
		return err
	}
	if utf8.RuneCountInString(r.Name) > 200 {
		return invalid("name", "name must be at most 200 characters.")
	}
	return nil
}

// validEmail accepts a bare address (no display name), as Gmail reports it.
func validEmail(email string) error {
	a, err := mail.ParseAddress(email)
	if err != nil || a.Name != "" || a.Address != email || len(email) > 254 || !strings.Contains(email[strings.LastIndexByte(email, '@')+1:], ".") {
		return invalid("email", "email must be a plain address such as ada@example.com.")
	}
	return nil
}

func (s *server) createUser(c *gin.Context) {
	var req createUserRequest
	if err := bindJSON(c, &req); err != nil {
		s.fail(c, err)
		return
	}
	if err := req.validate(); err != nil {
		s.fail(c, err)
		return
	}
	var u store.User
	err := s.deps.DB.Update(func(tx *store.Tx) error {
		var err error
		u, err = tx.UserCreate(req.Email, req.Name)
		return err
	})
	if errors.Is(err, store.ErrConflict) {
		s.fail(c, conflict("email", "A user with that email already exists."))
		return
	}
	if err != nil {
		s.fail(c, err)
		return
	}
	s.writeJSON(c, http.StatusCreated, toUserJSON(u))
}

func (s *server) listUsers(c *gin.Context) {
	var users []store.User
	if err := s.deps.DB.View(func(tx *store.Tx) error {
		var err error
		users, err = tx.Users()
		return err
	}); err != nil {
		s.fail(c, err)
		return
	}
	out := make([]userJSON, 0, len(users))
	for _, u := range users {
		out = append(out, toUserJSON(u))
	}
	s.writeJSON(c, http.StatusOK, gin.H{"users": out})
}
