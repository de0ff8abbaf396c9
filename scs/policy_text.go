package scs

// MarshalText implements encoding.TextMarshaler: the policy's String. An
// unknown policy is an error.
func (p Policy) MarshalText() ([]byte, error) {
	if _, err := ParsePolicy(p.String()); err != nil {
		return nil, err
	}
	return []byte(p.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler, so flag.TextVar
// parses a policy: "thread_info", "on-stack" or "per-cpu" (see
// [ParsePolicy]).
func (p *Policy) UnmarshalText(text []byte) error {
	v, err := ParsePolicy(string(text))
	if err != nil {
		return err
	}
	*p = v
	return nil
}
