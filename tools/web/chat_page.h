// The web chat page of `sluice serve` (GET /): tools/web/chat.html, compiled into the binary by
// CMake (configure_file of chat_page.cpp.in), so the server needs no file beside it and no CDN.
#pragma once

#include <string_view>

namespace sluice::tools {

std::string_view chat_page_html();

}  // namespace sluice::tools
