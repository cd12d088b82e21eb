// gRPC framing (epp/extproc/grpc_framing.h) alone: the length prefix both ways, the prefixes a
// peer may send to hurt us (4 GiB, a compressed flag), grpc-timeout at its limits, and the
// trailers a call ends with.
#include "epp/extproc/grpc_framing.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

namespace llmd::epp::extproc {
namespace {

using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;

std::string prefix(unsigned char flag, uint32_t length) {
  return {static_cast<char>(flag), static_cast<char>(length >> 24), static_cast<char>(length >> 16),
          static_cast<char>(length >> 8), static_cast<char>(length)};
}

std::string value_of(const std::vector<http::Header>& headers, const std::string& name) {
  for (const auto& h : headers) {
    if (h.name == name) {
      return h.value;
    }
  }
  return "<absent>";
}

TEST(GrpcFraming, AMessageIsPrefixedWithFlagZeroAndItsBigEndianLength) {
  std::string out;
  ASSERT_TRUE(append_message(out, std::string(258, 'x')));
  EXPECT_EQ(out.substr(0, 5), prefix(0, 258));
  EXPECT_EQ(out.substr(0, 5), std::string("\0\0\0\x01\x02", 5));
  EXPECT_EQ(out.size(), 5u + 258u);
  ASSERT_TRUE(append_message(out, ""));
  EXPECT_EQ(out.substr(263), prefix(0, 0));
}

TEST(GrpcFraming, TheDecoderReadsWhatTheEncoderWroteInAnyPieces) {
  std::string wire;
  append_message(wire, "first");
  append_message(wire, "");
  append_message(wire, std::string(70000, 'y'));
  MessageDecoder decoder(1 << 20);
  std::vector<std::string> got;
  for (char c : wire) {  // one byte at a time: every split of prefix and body
    decoder.feed(std::string_view(&c, 1));
    while (decoder.next().state == MessageDecoder::State::kPrefix) {
      auto message = decoder.take();
      if (!message) {
        break;
      }
      got.push_back(std::move(*message));
    }
  }
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], "first");
  EXPECT_EQ(got[1], "");
  EXPECT_EQ(got[2], std::string(70000, 'y'));
  EXPECT_EQ(decoder.next().state, MessageDecoder::State::kNeedMore);
  EXPECT_EQ(decoder.capacity(), std::string().capacity());  // nothing held once all is taken
}

// What a stream's end would truncate: part of a prefix, part of a message, part of a skipped
// one; a whole message taken leaves nothing.
TEST(GrpcFraming, TheDecoderKnowsWhenItHoldsPartOfAMessage) {
  MessageDecoder d(1024);
  EXPECT_FALSE(d.holds_partial());
  d.feed(prefix(0, 4).substr(0, 2));
  EXPECT_TRUE(d.holds_partial());
  d.feed(prefix(0, 4).substr(2) + "ab");
  ASSERT_EQ(d.next().state, MessageDecoder::State::kPrefix);
  EXPECT_FALSE(d.take().has_value());
  EXPECT_TRUE(d.holds_partial());
  d.feed("cd");
  EXPECT_EQ(d.take().value_or(""), "abcd");
  EXPECT_FALSE(d.holds_partial());
  d.feed(prefix(0, 8) + "xy");
  ASSERT_EQ(d.next().state, MessageDecoder::State::kPrefix);
  d.skip();
  EXPECT_TRUE(d.holds_partial()) << "six bytes of the skipped message are still to come";
  d.feed("123456");
  EXPECT_FALSE(d.holds_partial());
}

TEST(GrpcFraming, APrefixOf4GiBIsRefusedBeforeAnyByteOfItIsHeld) {
  MessageDecoder decoder(4 * 1024 * 1024);
  decoder.feed(prefix(0, 0xFFFFFFFFu) + "abc");
  const auto next = decoder.next();
  ASSERT_EQ(next.state, MessageDecoder::State::kError);
  EXPECT_EQ(next.error.code, GrpcCode::kResourceExhausted);
  EXPECT_EQ(next.error.message, "message of 4294967295 bytes is over the limit of 4194304");
  EXPECT_LT(decoder.capacity(), 1024u);
  decoder.feed(std::string(100000, 'z'));  // the rest of the stream is dropped, not held
  EXPECT_LT(decoder.capacity(), 1024u);
  EXPECT_EQ(decoder.next().state, MessageDecoder::State::kNeedMore);
}

TEST(GrpcFraming, ALengthOneOverTheLimitIsRefusedAndOneAtItIsRead) {
  MessageDecoder over(10);
  over.feed(prefix(0, 11));
  EXPECT_EQ(over.next().error.code, GrpcCode::kResourceExhausted);
  MessageDecoder at(10);
  at.feed(prefix(0, 10) + "0123456789");
  ASSERT_EQ(at.next().state, MessageDecoder::State::kPrefix);
  EXPECT_EQ(at.take().value_or("<none>"), "0123456789");
}

TEST(GrpcFraming, The4GiBLengthDoesNotWrapWhenTheLimitAllowsIt) {
  MessageDecoder decoder(std::numeric_limits<std::size_t>::max());
  decoder.feed(prefix(0, 0xFFFFFFFFu));
  const auto next = decoder.next();
  ASSERT_EQ(next.state, MessageDecoder::State::kPrefix);
  EXPECT_EQ(next.length, std::size_t{0xFFFFFFFFu});
  decoder.skip();  // refused by the caller (e.g. its budget): dropped as it arrives
  decoder.feed(std::string(4096, 'q'));
  EXPECT_LT(decoder.capacity(), 1024u);
  EXPECT_EQ(decoder.next().state, MessageDecoder::State::kNeedMore);
}

TEST(GrpcFraming, ASkippedMessageIsDroppedAcrossFeedsAndTheNextOneIsRead) {
  MessageDecoder decoder(1000);
  decoder.feed(prefix(0, 6) + "ab");
  ASSERT_EQ(decoder.next().state, MessageDecoder::State::kPrefix);
  decoder.skip();
  std::string rest = "cdef";
  append_message(rest, "kept");
  decoder.feed(rest);
  ASSERT_EQ(decoder.next().state, MessageDecoder::State::kPrefix);
  EXPECT_EQ(decoder.take().value_or("<none>"), "kept");
}

TEST(GrpcFraming, ACompressedFlagWithoutNegotiatedCompressionIsInternal) {
  MessageDecoder decoder(1000);
  decoder.feed(prefix(1, 3) + "abc");
  const auto next = decoder.next();
  ASSERT_EQ(next.state, MessageDecoder::State::kError);
  EXPECT_EQ(next.error.code, GrpcCode::kInternal);
  EXPECT_NE(next.error.message.find("compressed"), std::string::npos);
  decoder.feed(prefix(0, 1) + "x");  // the call is over: nothing more is read
  EXPECT_EQ(decoder.next().state, MessageDecoder::State::kNeedMore);
}

TEST(GrpcFraming, AFlagOtherThanZeroOrOneIsInternal) {
  MessageDecoder decoder(1000);
  decoder.feed(prefix(2, 0));
  const auto next = decoder.next();
  EXPECT_EQ(next.state, MessageDecoder::State::kError);
  EXPECT_EQ(next.error.code, GrpcCode::kInternal);
}

TEST(GrpcFraming, TimeoutUnitsAreRead) {
  EXPECT_EQ(parse_grpc_timeout("1H"), hours(1));
  EXPECT_EQ(parse_grpc_timeout("2M"), std::chrono::minutes(2));
  EXPECT_EQ(parse_grpc_timeout("3S"), seconds(3));
  EXPECT_EQ(parse_grpc_timeout("250m"), milliseconds(250));
  EXPECT_EQ(parse_grpc_timeout("7u"), std::chrono::microseconds(7));
  EXPECT_EQ(parse_grpc_timeout("99999999n"), nanoseconds(99999999));
  EXPECT_EQ(parse_grpc_timeout("0m"), nanoseconds(0));
}

TEST(GrpcFraming, ATimeoutOf99999999HoursIsClampedNotOverflowed) {
  // 99999999 h is 3.6e20 ns: past int64 nanoseconds (9.2e18).
  EXPECT_EQ(parse_grpc_timeout("99999999H"), kMaxGrpcTimeout);
  EXPECT_EQ(parse_grpc_timeout("99999999M"), kMaxGrpcTimeout);  // 6.0e18 ns: past the clamp
  EXPECT_EQ(parse_grpc_timeout("876000H"), kMaxGrpcTimeout);    // exactly the clamp
  EXPECT_EQ(parse_grpc_timeout("875999H"), hours(875999));
  EXPECT_EQ(parse_grpc_timeout("99999999S"), seconds(99999999));
  const auto deadline = std::chrono::steady_clock::now() + *parse_grpc_timeout("99999999H");
  EXPECT_GT(deadline, std::chrono::steady_clock::now());
}

TEST(GrpcFraming, MalformedTimeoutsAreIgnored) {
  for (const char* bad : {"", "S", "5", "123456789S", "12x", "-5S", "5 S", "1.5S", "10s"}) {
    EXPECT_EQ(parse_grpc_timeout(bad), std::nullopt) << bad;
  }
}

TEST(GrpcFraming, TrailersCarryTheStatusAndAPercentEncodedMessage) {
  const auto ok = status_trailers({});
  ASSERT_EQ(ok.size(), 1u);
  EXPECT_EQ(ok[0].name, "grpc-status");
  EXPECT_EQ(ok[0].value, "0");
  const auto t = status_trailers({GrpcCode::kResourceExhausted, "50% over\nlimit: caf\xC3\xA9"});
  EXPECT_EQ(value_of(t, "grpc-status"), "8");
  EXPECT_EQ(value_of(t, "grpc-message"), "50%25 over%0Alimit: caf%C3%A9");
  EXPECT_EQ(percent_encode_grpc_message(" ~!"), " ~!");
  EXPECT_EQ(percent_encode_grpc_message(std::string("\x7f\x1f", 2)), "%7F%1F");
}

TEST(GrpcFraming, TrailersOnlyIsAResponseHeadWithTheStatus) {
  const auto h = trailers_only({GrpcCode::kUnimplemented, "unknown method /a.B/C"});
  EXPECT_EQ(value_of(h, ":status"), "200");
  EXPECT_EQ(value_of(h, "content-type"), "application/grpc");
  EXPECT_EQ(value_of(h, "grpc-status"), "12");
  EXPECT_EQ(value_of(h, "grpc-message"), "unknown method /a.B/C");
  EXPECT_EQ(value_of(response_headers(), "grpc-accept-encoding"), "identity");
  EXPECT_EQ(value_of(response_headers(), "grpc-status"), "<absent>");
}

TEST(GrpcFraming, RequestsThatAreNotGrpcOrNotServedAreRefused) {
  RequestHead head;
  head.add(":method", "GET");
  head.add(":path", "/a.B/C");
  head.add("content-type", "application/grpc+proto");
  head.add("x-other", "ignored");
  EXPECT_EQ(http_refusal(head), 405);
  head.add(":method", "POST");
  EXPECT_EQ(http_refusal(head), 0);
  head.add("content-type", "application/json");
  EXPECT_EQ(http_refusal(head), 415);
  head.add("content-type", "application/grpc");
  EXPECT_EQ(call_refusal(head, true), std::nullopt);
  EXPECT_EQ(call_refusal(head, false)->code, GrpcCode::kUnimplemented);
  EXPECT_EQ(call_refusal(head, false)->message, "unknown method /a.B/C");
  head.add("grpc-encoding", "gzip");
  EXPECT_EQ(call_refusal(head, true)->code, GrpcCode::kUnimplemented);
  head.add("grpc-encoding", "identity");
  EXPECT_EQ(call_refusal(head, true), std::nullopt);
  head.add("grpc-timeout", "5S");
  EXPECT_EQ(head.timeout, "5S");
}

}  // namespace
}  // namespace llmd::epp::extproc
