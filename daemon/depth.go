package daemon

import "github.com/dpvm/dpvm/task"

// maxMsgDepth bounds the nesting of msgpack arrays and maps in a control
// message: the decoder recurses once per level (skipping unknown fields
// too), so a frame of nested one-element arrays would otherwise cost a
// stack as deep as the frame is long.
const maxMsgDepth = 32

// maxMsgItems bounds the items one array or map of a control message may
// claim: the decoder sizes slices from the claim before reading them.
const maxMsgItems = 1 << 20

// controlLimits is what a control message may hold: the one msgpack
// walker of the project (task.CheckMsgpackLimits) checks every control
// frame against it before the decoder sees it.
var controlLimits = task.MsgpackLimits{MaxDepth: maxMsgDepth, MaxItems: maxMsgItems}
