// The one error type of the HTTP edge: an HTTP status plus OpenAI's error body
// {"error": {"message", "type", "param", "code"}}.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kvik::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string param;  // the request field at fault, "" when none
  std::string type;   // "" = derived from the status

  static ApiError bad_request(std::string message, std::string param = "") {
    return {400, std::move(message), std::move(param), "BadRequestError"};
  }

  std::string type_name() const {
    if (!type.empty()) return type;
    switch (status) {
      case 400: return "BadRequestError";
      case 401: return "AuthenticationError";
      case 404: return "NotFoundError";
      case 413: return "BadRequestError";
      case 429: return "RateLimitError";
      case 503: return "ServiceUnavailableError";
      default: return "InternalServerError";
    }
  }

  nlohmann::json to_json() const {
    return {{"error",
             {{"message", message},
              {"type", type_name()},
              {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
              {"code", status}}}};
  }
};

}  // namespace kvik::server
