"""What the core may know of OpenAPI documents as a kind of source (``toolcrib.entries.Kind``)."""

from toolcrib.entries import Kind

KIND = Kind("openapi", "OpenAPI document", "the OpenAPI document", "document", table=lambda config: config.openapi,
            where="an OpenAPI document ([openapi.{ns}])")
