package mem

// AttachFP, set by package fp when it is initialised, makes the fp.Config
// that cfg points to read the stacks and return stacks it has no caller
// Data for from m, with atomic word loads. It is how unwindkit's machine
// model and captures build frame-pointer walks over their own memory,
// which a running model may be writing, while the public fp API mentions
// no internal type: a caller outside this module hands fp plain bytes
// (fp.Stack.Data) instead. cfg must be a *fp.Config.
var AttachFP func(cfg any, m *Memory)
