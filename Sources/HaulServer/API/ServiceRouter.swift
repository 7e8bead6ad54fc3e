package import Hummingbird
package import HummingbirdWebSocket

/// The service's router: the API's error bodies around everything, the access rules in
/// front of every route, the API under `/api/v1` (with the shared queue's under
/// `/api/v1/cluster`, and its OpenAPI document at `/api/v1/openapi.json`), the metrics at
/// `/metrics`, aria2's JSON-RPC at `/jsonrpc`, and the dashboard at `/`.
@available(macOS 14, iOS 17, tvOS 17, *)
package enum ServiceRouter {
    package static func make(
        core: ServiceCore, rules: AccessRulesBox, rpc: Aria2RPC? = nil, dashboard: DashboardFiles = DashboardFiles()
    ) -> Router<BasicRequestContext> {
        let router = Router(context: BasicRequestContext.self)
        router.add(middleware: APIErrorMiddleware())
        router.add(middleware: AccessMiddleware(rules: rules, sessions: core.sessions))
        let api = router.group("api/v1")
        DownloadsAPI(core: core).addRoutes(to: api)
        SessionAPI(core: core, rules: rules).addRoutes(to: api)
        SettingsAPI(core: core).addRoutes(to: api)
        SyncsAPI(core: core).addRoutes(to: api)
        EventsAPI(core: core).addRoutes(to: api)
        ClusterAPI(core: core).addRoutes(to: api)
        // The API's contract (OpenAPI 3.1), kept in the repository with the dashboard's files.
        api.get("openapi.json") { _, _ in try dashboard.response(for: DashboardFiles.openAPIName) }
        MetricsAPI(core: core).addRoutes(to: router)
        Aria2API(rpc: rpc ?? Aria2RPC(core: core, rules: rules), rules: rules).addRoutes(to: router)
        dashboard.addRoutes(to: router)
        return router
    }
}

/// The router the server consults for WebSocket upgrades: aria2's JSON-RPC at `/jsonrpc`,
/// behind the same access rules. A refused upgrade goes on to the HTTP router, which
/// refuses it again with the API's error body.
@available(macOS 14, iOS 17, tvOS 17, *)
package enum WebSocketRouter {
    package static func make(core: ServiceCore, rules: AccessRulesBox, rpc: Aria2RPC)
        -> Router<BasicWebSocketRequestContext>
    {
        let router = Router(context: BasicWebSocketRequestContext.self)
        router.add(middleware: AccessMiddleware(rules: rules, sessions: core.sessions))
        Aria2API(rpc: rpc, rules: rules).addWebSocketRoutes(to: router)
        return router
    }
}
