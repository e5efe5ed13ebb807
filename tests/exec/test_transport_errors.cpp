// plain_transport_message: Gloo's and c10d's errors as a user reads them.
// Expected: the message Gloo gave when rank 1 was killed during a step (recorded from LibTorch
// 2.15's Gloo) becomes "the connection was lost: the peer stopped or closed it (Read error
// [127.0.0.1]:29093: Connection reset by peer)": no source path, no advice, no emoji, one line;
// c10d's timeout says it timed out; a refused connection says so; a message of another kind
// comes back as its first line without the source location.
#include <catch2/catch.hpp>

#include "transport_errors.hpp"

using pipescope::exec::plain_transport_message;

TEST_CASE("a peer that stopped: the connection was lost, with Gloo's reason") {
  const std::string gloo =
      "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:545] Read error [127.0.0.1]:29093: Connection "
      "reset by peer. This is typically caused by a remote worker hanging or bugs in the application. Check the logs of "
      "the remote worker before reporting an error. GLHF! \xf0\x9f\x8f\x96\xef\xb8\x8f\nException raised from ...";
  CHECK(plain_transport_message(gloo) ==
        "the connection was lost: the peer stopped or closed it (Read error [127.0.0.1]:29093: Connection reset by peer)");
  CHECK(plain_transport_message("[../gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:41352") ==
        "the connection was lost: the peer stopped or closed it (Connection closed by peer [127.0.0.1]:41352)");
}

TEST_CASE("timeouts and refused connections say what happened") {
  CHECK(plain_transport_message("[../gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 60000ms for recv operation "
                                "to complete\nException raised from ...") ==
        "timed out waiting for the peer (Timed out waiting 60000ms for recv operation to complete)");
  CHECK(plain_transport_message("[../gloo/transport/tcp/pair.cc:197] connect [127.0.0.1]:5555: Connection refused") ==
        "the connection was refused: nothing listens at the peer's address (connect [127.0.0.1]:5555: Connection refused)");
}

TEST_CASE("other messages keep their first line, without the source location") {
  CHECK(plain_transport_message("[enforce fail at ../gloo/common/linux.cc:12] size mismatch\nbacktrace") ==
        "size mismatch");
  CHECK(plain_transport_message("Tensors must be contiguous") == "Tensors must be contiguous");
  CHECK(plain_transport_message("") == "");
}
