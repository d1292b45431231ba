package postgres

import (
	"strings"
	"unicode/utf8"
)

// transactionControl finds the first statement of sql that controls the
// transaction it runs in: BEGIN, START TRANSACTION, COMMIT (and COMMIT
// PREPARED), END, ROLLBACK (and ROLLBACK TO, ROLLBACK PREPARED), ABORT,
// SAVEPOINT, RELEASE, PREPARE TRANSACTION, SET [LOCAL | SESSION]
// TRANSACTION, SET SESSION CHARACTERISTICS, and SET of the parameters
// transaction_isolation, transaction_read_only and transaction_deferrable.
// It returns the statement's leading words, upper-cased (say "ROLLBACK TO"),
// and whether it found one.
//
// sql may hold several statements separated by semicolons (the simple
// protocol sends them so); each is looked at. Comments (-- and nested /* */),
// string constants ('…', E'…' with backslash escapes, dollar-quoted $tag$…$tag$)
// and quoted identifiers are skipped as PostgreSQL's lexer skips them, with
// standard_conforming_strings on (the default, and what pgx requires); the
// words are compared without regard to case; whitespace, comments and
// opening parentheses before a statement's first word are passed over. A
// semicolon inside parentheses or inside the body of a CREATE FUNCTION …
// BEGIN ATOMIC is taken as the end of a statement: either way the words
// after it are looked at, so that nothing can hide a statement there (a
// function body of that form is refused when it holds END).
func transactionControl(sql string) (string, bool) {
	s := sqlScanner{src: sql}
	for !s.done() {
		words := s.statement(4)
		if w, ok := controlWords(words); ok {
			return w, true
		}
	}
	return "", false
}

// controlWords reports whether a statement whose leading words are words
// controls its transaction, and which words name it.
func controlWords(words []string) (string, bool) {
	at := func(i int) string {
		if i < len(words) {
			return words[i]
		}
		return ""
	}
	switch at(0) {
	case "BEGIN", "COMMIT", "END", "ABORT", "SAVEPOINT", "RELEASE":
		return at(0), true
	case "ROLLBACK":
		if at(1) == "TO" || at(1) == "PREPARED" {
			return "ROLLBACK " + at(1), true
		}
		return "ROLLBACK", true
	case "START":
		return "START TRANSACTION", true
	case "PREPARE":
		if at(1) == "TRANSACTION" {
			return "PREPARE TRANSACTION", true
		}
	case "SET":
		// SET [LOCAL | SESSION] TRANSACTION …, SET [LOCAL | SESSION]
		// SESSION CHARACTERISTICS …, or SET of a parameter.
		rest := words[1:]
		if len(rest) > 1 && (rest[0] == "LOCAL" || rest[0] == "SESSION") && rest[1] != "CHARACTERISTICS" {
			rest = rest[1:]
		}
		switch {
		case len(rest) > 0 && rest[0] == "TRANSACTION":
			return "SET TRANSACTION", true
		case len(rest) > 1 && rest[0] == "SESSION" && rest[1] == "CHARACTERISTICS":
			return "SET SESSION CHARACTERISTICS", true
		case len(rest) > 0 && (rest[0] == "TRANSACTION_ISOLATION" || rest[0] == "TRANSACTION_READ_ONLY" || rest[0] == "TRANSACTION_DEFERRABLE"):
			return "SET " + rest[0], true
		}
	}
	return "", false
}

// sqlScanner walks SQL text statement by statement, as PostgreSQL's lexer
// reads it.
type sqlScanner struct {
	src string
	i   int
}

func (s *sqlScanner) done() bool { return s.i >= len(s.src) }

// statement reads the statement at the scanner's position, up to and past
// the semicolon that ends it, and returns its first n words, upper-cased.
// A word is an unquoted identifier or keyword; the first word is looked
// for past whitespace, comments and opening parentheses, and the words
// after it are those that follow one another separated only by whitespace
// and comments.
func (s *sqlScanner) statement(n int) []string {
	var words []string
	leading := true // nothing but blanks, comments and parentheses yet
	open := true    // the words read so far follow one another
	for s.i < len(s.src) {
		c := s.src[s.i]
		switch {
		case c == ';':
			s.i++
			return words
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			s.i++
		case c == '-' && strings.HasPrefix(s.src[s.i:], "--"):
			s.lineComment()
		case c == '/' && strings.HasPrefix(s.src[s.i:], "/*"):
			s.blockComment()
		case c == '(' && leading:
			s.i++
		case identStart(s.src[s.i:]):
			start := s.i
			s.ident()
			word := s.src[start:s.i]
			if (word == "E" || word == "e") && s.i < len(s.src) && s.src[s.i] == '\'' {
				s.quoted('\'', true)
				open = false
				leading = false
				continue
			}
			if open && len(words) < n {
				words = append(words, strings.ToUpper(word))
			}
			leading = false
		case c == '\'':
			s.quoted('\'', false)
			open, leading = false, false
		case c == '"':
			s.quoted('"', false)
			open, leading = false, false
		case c == '$':
			if !s.dollarQuoted() {
				s.i++ // a parameter ($1) or a lone dollar sign
			}
			open, leading = false, false
		default:
			s.i++
			open, leading = false, false
		}
	}
	return words
}

// identStart reports whether s begins an unquoted identifier or keyword: a
// letter (any non-ASCII character counts as one, as for PostgreSQL) or an
// underscore.
func identStart(s string) bool {
	c := s[0]
	return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c >= utf8.RuneSelf
}

// ident reads an unquoted identifier: letters, digits, underscores and
// dollar signs.
func (s *sqlScanner) ident() {
	for s.i < len(s.src) {
		c := s.src[s.i]
		if c == '_' || c == '$' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c >= utf8.RuneSelf {
			s.i++
			continue
		}
		return
	}
}

// lineComment reads a comment from -- to the end of the line.
func (s *sqlScanner) lineComment() {
	for s.i < len(s.src) && s.src[s.i] != '\n' && s.src[s.i] != '\r' {
		s.i++
	}
}

// blockComment reads a comment from /* to its */; such comments nest.
func (s *sqlScanner) blockComment() {
	depth := 0
	for s.i < len(s.src) {
		switch {
		case strings.HasPrefix(s.src[s.i:], "/*"):
			depth++
			s.i += 2
		case strings.HasPrefix(s.src[s.i:], "*/"):
			depth--
			s.i += 2
			if depth == 0 {
				return
			}
		default:
			s.i++
		}
	}
}

// quoted reads a constant or identifier quoted with q, in which q is
// written twice to stand for itself; with escapes, a backslash escapes the
// character after it (an E'…' string).
func (s *sqlScanner) quoted(q byte, escapes bool) {
	s.i++ // the opening quote
	for s.i < len(s.src) {
		c := s.src[s.i]
		switch {
		case escapes && c == '\\':
			s.i += 2
		case c == q && s.i+1 < len(s.src) && s.src[s.i+1] == q:
			s.i += 2
		case c == q:
			s.i++
			return
		default:
			s.i++
		}
	}
}

// dollarQuoted reads a dollar-quoted string ($$…$$ or $tag$…$tag$) when one
// starts at the scanner's position, and reports whether one did. A dollar
// sign inside an identifier never gets here: ident reads it.
func (s *sqlScanner) dollarQuoted() bool {
	rest := s.src[s.i+1:]
	end := strings.IndexByte(rest, '$')
	if end < 0 {
		return false
	}
	tag := rest[:end]
	if tag != "" && (!identStart(tag) || strings.ContainsFunc(tag, func(r rune) bool {
		return !(r == '_' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r >= utf8.RuneSelf)
	})) {
		return false
	}
	delim := "$" + tag + "$"
	body := s.src[s.i+len(delim):]
	end = strings.Index(body, delim)
	if end < 0 {
		s.i = len(s.src) // unterminated: the server refuses it whole
		return true
	}
	s.i += len(delim) + end + len(delim)
	return true
}
