package snapshot

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"io"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/unwindkit/unwindkit/internal/errs"
)

// jreader reads one JSON document (RFC 8259) from a stream, a token at a
// time, and never holds more of it than the value being decoded: Load
// walks the snapshot's shape with it, so every limit is checked while
// reading, before anything is allocated for the data past the limit.
// Syntax errors carry the byte offset (from 0) of the first byte that
// cannot be valid, or of the end of the input.
type jreader struct {
	r     *bufio.Reader
	off   int64 // offset of the next byte
	ioErr error // a read error other than EOF
}

// maxDepth bounds the nesting of skipped values (unknown fields).
const maxDepth = 64

func (j *jreader) next() (byte, bool) {
	c, err := j.r.ReadByte()
	if err != nil {
		if err != io.EOF {
			j.ioErr = err
		}
		return 0, false
	}
	j.off++
	return c, true
}

// syntaxAt returns a syntax error at byte offset off.
func (j *jreader) syntaxAt(off int64, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if j.ioErr != nil {
		msg = fmt.Sprintf("reading: %v", j.ioErr)
	}
	return errs.Corruptf(RuleSyntax, uint64(off), "byte offset %d: %s", off, msg)
}

// eof is the error for input that ends inside the document.
func (j *jreader) eof() error {
	return j.syntaxAt(j.off, "unexpected end of input")
}

// ws returns the next byte that is not JSON whitespace and its offset.
func (j *jreader) ws() (byte, int64, error) {
	for {
		c, ok := j.next()
		if !ok {
			return 0, j.off, j.eof()
		}
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return c, j.off - 1, nil
		}
	}
}

// end checks that only whitespace follows the document.
func (j *jreader) end() error {
	for {
		c, ok := j.next()
		if !ok {
			if j.ioErr != nil {
				return j.syntaxAt(j.off, "")
			}
			return nil
		}
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return j.syntaxAt(j.off-1, "trailing data after the snapshot")
		}
	}
}

// kind names the JSON value starting with c, for type errors.
func kind(c byte) string {
	switch {
	case c == '{':
		return "object"
	case c == '[':
		return "array"
	case c == '"':
		return "string"
	case c == 't' || c == 'f':
		return "boolean"
	case c == 'n':
		return "null"
	}
	return "number"
}

// typeErr is a value of the wrong JSON type for field.
func typeErr(field string, c byte, off int64, want string) error {
	return errs.Corruptf(RuleBadValue, uint64(off), "%s: JSON %s where %s is wanted (byte offset %d)", field, kind(c), want, off)
}

// str reads a string whose opening quote has been read, keeping at most
// max bytes (a longer string is an error for field). With sink, the bytes
// go to sink instead (p at byte offset off; runs of plain bytes at once)
// and nothing is kept.
func (j *jreader) str(field string, max int, sink func(p []byte, off int64) error) (string, error) {
	var b []byte
	put := func(c byte, off int64) error {
		if sink != nil {
			return sink([]byte{c}, off)
		}
		if len(b) >= max {
			return errs.Corruptf(RuleBadValue, uint64(off), "%s: string longer than %d bytes (byte offset %d)", field, max, off)
		}
		b = append(b, c)
		return nil
	}
	for {
		if sink != nil {
			// The bytes already buffered up to a quote, backslash or
			// control character go to sink in one call.
			if j.r.Buffered() == 0 {
				j.r.Peek(1)
			}
			buf, _ := j.r.Peek(j.r.Buffered())
			n := 0
			for n < len(buf) && buf[n] != '"' && buf[n] != '\\' && buf[n] >= 0x20 {
				n++
			}
			if n > 0 {
				if err := sink(buf[:n], j.off); err != nil {
					return "", err
				}
				j.r.Discard(n)
				j.off += int64(n)
				continue
			}
		}
		c, ok := j.next()
		switch {
		case !ok:
			return "", j.eof()
		case c == '"':
			return string(b), nil
		case c < 0x20:
			return "", j.syntaxAt(j.off-1, "control character %#02x in string", c)
		case c != '\\':
			if err := put(c, j.off-1); err != nil {
				return "", err
			}
			continue
		}
		at := j.off - 1
		e, ok := j.next()
		if !ok {
			return "", j.eof()
		}
		var r rune
		switch e {
		case '"', '\\', '/':
			r = rune(e)
		case 'b':
			r = '\b'
		case 'f':
			r = '\f'
		case 'n':
			r = '\n'
		case 'r':
			r = '\r'
		case 't':
			r = '\t'
		case 'u':
			var err error
			if r, err = j.hex4(); err != nil {
				return "", err
			}
			if utf16.IsSurrogate(r) {
				// A high surrogate must be followed by \u and a low one;
				// otherwise it decodes to U+FFFD, as encoding/json does.
				if c1, ok := j.peek2(); ok && c1 == [2]byte{'\\', 'u'} {
					j.next()
					j.next()
					r2, err := j.hex4()
					if err != nil {
						return "", err
					}
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						r = d
					} else {
						var buf [utf8.UTFMax]byte
						for _, c := range buf[:utf8.EncodeRune(buf[:], utf8.RuneError)] {
							if err := put(c, at); err != nil {
								return "", err
							}
						}
						r = r2
						if utf16.IsSurrogate(r) {
							r = utf8.RuneError
						}
					}
				} else {
					r = utf8.RuneError
				}
			}
		default:
			return "", j.syntaxAt(j.off-1, "invalid escape \\%c in string", e)
		}
		var buf [utf8.UTFMax]byte
		for _, c := range buf[:utf8.EncodeRune(buf[:], r)] {
			if err := put(c, at); err != nil {
				return "", err
			}
		}
	}
}

func (j *jreader) peek2() ([2]byte, bool) {
	p, err := j.r.Peek(2)
	if err != nil {
		return [2]byte{}, false
	}
	return [2]byte{p[0], p[1]}, true
}

func (j *jreader) hex4() (rune, error) {
	var r rune
	for range 4 {
		c, ok := j.next()
		if !ok {
			return 0, j.eof()
		}
		v, err := strconv.ParseUint(string(c), 16, 8)
		if err != nil {
			return 0, j.syntaxAt(j.off-1, "invalid hex digit %q in \\u escape", c)
		}
		r = r<<4 | rune(v)
	}
	return r, nil
}

// literal reads the rest of true, false or null, whose first byte c has
// been read.
func (j *jreader) literal(c byte) error {
	word := map[byte]string{'t': "true", 'f': "false", 'n': "null"}[c]
	for i := 1; i < len(word); i++ {
		d, ok := j.next()
		if !ok {
			return j.eof()
		}
		if d != word[i] {
			return j.syntaxAt(j.off-1, "invalid character %q in literal %s", d, word)
		}
	}
	return nil
}

// number reads a number whose first byte c (at off) has been read and
// returns its text. It stops before the byte that follows it.
func (j *jreader) number(c byte, off int64) (string, error) {
	b := []byte{c}
	for {
		p, err := j.r.Peek(1)
		if err != nil || !(p[0] >= '0' && p[0] <= '9' || p[0] == '.' || p[0] == 'e' || p[0] == 'E' || p[0] == '+' || p[0] == '-') {
			break
		}
		if len(b) >= 64 {
			return "", j.syntaxAt(j.off, "number longer than 64 bytes")
		}
		j.next()
		b = append(b, p[0])
	}
	if i := badNumber(b); i >= 0 {
		return "", j.syntaxAt(off+int64(i), "invalid number %q", b)
	}
	return string(b), nil
}

// badNumber returns the index of the first byte of b that breaks the JSON
// number grammar, len(b) if b ends too early, or -1 if b is a number.
func badNumber(b []byte) int {
	i := 0
	digits := func() bool {
		s := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > s
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		return i
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return i
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return i
		}
	}
	if i < len(b) {
		return i
	}
	return -1
}

// skip reads and discards the value starting with c (at off), keeping
// nothing: unknown fields cost time, not memory.
func (j *jreader) skip(c byte, off int64, depth int) error {
	if depth > maxDepth {
		return j.syntaxAt(off, "nesting deeper than %d", maxDepth)
	}
	switch {
	case c == '"':
		_, err := j.str("", 0, func([]byte, int64) error { return nil })
		return err
	case c == '{':
		return j.object(func(string, int64) error {
			c, off, err := j.ws()
			if err != nil {
				return err
			}
			return j.skip(c, off, depth+1)
		})
	case c == '[':
		return j.array(func(int) error {
			c, off, err := j.ws()
			if err != nil {
				return err
			}
			return j.skip(c, off, depth+1)
		})
	case c == 't' || c == 'f' || c == 'n':
		return j.literal(c)
	case c == '-' || c >= '0' && c <= '9':
		_, err := j.number(c, off)
		return err
	}
	return j.syntaxAt(off, "invalid character %q looking for a value", c)
}

// object reads the members of an object whose '{' has been read, calling
// member with each key (and its offset); member reads the value.
func (j *jreader) object(member func(key string, off int64) error) error {
	for first := true; ; first = false {
		c, off, err := j.ws()
		if err != nil {
			return err
		}
		if c == '}' && first {
			return nil
		}
		if c != '"' {
			return j.syntaxAt(off, "invalid character %q looking for an object key", c)
		}
		key, err := j.str("(key)", 1<<12, nil)
		if err != nil {
			return err
		}
		if c, off, err = j.ws(); err != nil {
			return err
		} else if c != ':' {
			return j.syntaxAt(off, "invalid character %q after object key", c)
		}
		if err := member(key, off); err != nil {
			return err
		}
		if done, err := j.after('}', "object member"); done || err != nil {
			return err
		}
	}
}

// array reads the elements of an array whose '[' has been read, calling
// elem with each index; elem reads the value.
func (j *jreader) array(elem func(i int) error) error {
	for i := 0; ; i++ {
		p, err := j.r.Peek(1)
		for err == nil && (p[0] == ' ' || p[0] == '\t' || p[0] == '\n' || p[0] == '\r') {
			j.next()
			p, err = j.r.Peek(1)
		}
		if err != nil {
			j.next() // records a read error
			return j.eof()
		}
		if p[0] == ']' && i == 0 {
			j.next()
			return nil
		}
		if err := elem(i); err != nil {
			return err
		}
		if done, err := j.after(']', "array element"); done || err != nil {
			return err
		}
	}
}

// after reads what follows an object member or an array element (what):
// end closes the object or array (done), ',' says another follows, and
// anything else is a syntax error.
func (j *jreader) after(end byte, what string) (done bool, err error) {
	c, off, err := j.ws()
	if err != nil {
		return false, err
	}
	switch c {
	case end:
		return true, nil
	case ',':
		return false, nil
	}
	return false, j.syntaxAt(off, "invalid character %q after %s", c, what)
}

// base64 streams a string of standard base64 (RFC 4648, padded; CR and LF
// ignored, as encoding/base64 does) whose opening quote has been read into
// dst[:0], failing as soon as the decoded length passes limit (with
// tooLarge(n, off)). It decodes 4 KiB of text at a time, so it holds at
// most the decoded bytes up to the limit plus one chunk.
func (j *jreader) base64(field string, dst []byte, limit int, tooLarge func(n int, off int64) error) ([]byte, error) {
	const chunk = 4096
	var text [chunk]byte
	n := 0
	var textOff int64 // offset of text[0]
	padded := false
	flush := func(final bool) error {
		if n == 0 {
			return nil
		}
		if padded {
			return errs.Corruptf(RuleBadValue, uint64(textOff), "%s: bad base64: data after padding (byte offset %d)", field, textOff)
		}
		if len(dst)+n/4*3 > limit+3 {
			if err := tooLarge(len(dst)+n/4*3, textOff); err != nil {
				return err
			}
		}
		if need := len(dst) + (n+3)/4*3; need > cap(dst) {
			grown := make([]byte, len(dst), min(max(2*cap(dst), need, 64<<10), limit+chunk))
			copy(grown, dst)
			dst = grown
		}
		m, err := base64.StdEncoding.Decode(dst[len(dst):cap(dst)], text[:n])
		if err != nil {
			bad := textOff
			if ce, ok := err.(base64.CorruptInputError); ok {
				bad += int64(ce)
			}
			return errs.Corruptf(RuleBadValue, uint64(bad), "%s: bad base64: %v (byte offset %d)", field, err, bad)
		}
		padded = text[n-1] == '='
		dst = dst[:len(dst)+m]
		if len(dst) > limit {
			return tooLarge(len(dst), textOff)
		}
		n = 0
		return nil
	}
	_, err := j.str(field, 0, func(p []byte, off int64) error {
		for i, c := range p {
			if c == '\r' || c == '\n' {
				continue
			}
			if n == 0 {
				textOff = off + int64(i)
			}
			text[n] = c
			n++
			if n == chunk {
				if err := flush(false); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return dst, err
	}
	return dst, flush(true)
}
