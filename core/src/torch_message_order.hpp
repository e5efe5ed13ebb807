// torch's runtime posts every send and receive between two ranks on one ordered stream (no tags
// tell stages or kinds apart; Gloo and NCCL match the k-th receive rank b posts from rank a with
// the k-th send a posts to b), so a schedule it runs must post them in the same order on both
// sides. pipescope's own rule matches per pair of stages and kind, a weaker promise.
#pragma once

#include <vector>

#include "pipescope/core/schedule.hpp"

namespace pipescope {

// Moves receives earlier (never later) so that each rank posts its receives from every other
// rank in the order that rank posts the sends: message i's receive goes no later than the
// receive of any message sent after it, into that receive's step. Under torch's semantics a
// receive only posts, so posting it earlier changes no wait. Sends and receives that do not
// pair up are left where they are; the steps (idle ones included) stay.
void post_receives_in_send_order(Schedule& schedule);

}  // namespace pipescope
