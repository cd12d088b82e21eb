#pragma once
// Internal to common/http's clients (includes Beast; never include it from a public header).
#include <boost/asio/error.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>

namespace llmd::http::detail {

// The peer closed a kept-alive connection before answering: safe to reconnect and resend.
inline bool is_stale_connection(const boost::beast::error_code& ec) {
  namespace asio = boost::asio;
  return ec == boost::beast::http::error::end_of_stream || ec == asio::error::eof ||
         ec == asio::error::connection_reset || ec == asio::error::broken_pipe ||
         ec == asio::error::connection_aborted || ec == asio::error::not_connected;
}

}  // namespace llmd::http::detail
